"""Run by the concurrency test in several processes at once: launch, then run a pass, per student.

Usage: python -m tests.services.launcher START_AT COURSE_ID TEMPLATE_ID USER_ID...
"""

import sys
import time

import django


def main(argv: list[str]) -> None:
    django.setup()
    from django.contrib.auth import get_user_model

    from labs.models import Course, LabTemplate
    from labs.services.allocation import allocation_pass
    from labs.services.sessions import session_launch

    start_at, course_id, template_id, *user_ids = argv
    course = Course.objects.get(pk=course_id)
    template = LabTemplate.objects.get(pk=template_id)
    users = list(get_user_model().objects.filter(pk__in=user_ids))
    time.sleep(max(0.0, float(start_at) - time.time()))
    for user in users:
        session_launch(student=user, course=course, template=template)
        allocation_pass()


if __name__ == "__main__":
    main(sys.argv[1:])
