"""Make a change in a process that dies the moment its transaction commits, before any of its
``transaction.on_commit`` callbacks runs: as a portal process killed between the two would.

    python -m tests.crash_after_commit launch <student id> <course id> <template id>
    python -m tests.crash_after_commit stop <session id>

The first callback registered in the transaction ends the process with ``DIED``; callbacks run in
the order they were registered, so the change's own (the task sends) never run. Any other exit
status means the process did not get as far as the commit. ``commit_then_die`` runs it for a test.
"""

from __future__ import annotations

import os
import subprocess
import sys

DIED = 75


def commit_then_die(*args: str) -> None:
    """Run the change in a new process on the test's database; it must have died right after its commit."""
    from tests.conftest import ROOT, child_env

    result = subprocess.run(
        [sys.executable, "-m", "tests.crash_after_commit", *args],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == DIED, f"exit status {result.returncode}:\n{result.stdout}\n{result.stderr}"


def main(action: str, *ids: str) -> None:
    import django

    django.setup()
    from django.db import transaction

    from labs.domain.reasons import Reason
    from labs.models import Course, LabTemplate
    from labs.services.sessions import session_launch, session_stop

    with transaction.atomic():
        transaction.on_commit(lambda: os._exit(DIED))
        if action == "launch":
            from django.contrib.auth import get_user_model

            student_id, course_id, template_id = ids
            session_launch(
                student=get_user_model().objects.get(pk=student_id),
                course=Course.objects.get(pk=course_id),
                template=LabTemplate.objects.get(pk=template_id),
            )
        elif action == "stop":
            (session_id,) = ids
            if not session_stop(session_id=session_id, reason=Reason.of("session.stopped_by", who="tester")):
                raise SystemExit(f"session {session_id} was not stopped")
        else:
            raise SystemExit(f"unknown action {action!r}")
    raise SystemExit("the process outlived its commit")


if __name__ == "__main__":
    main(*sys.argv[1:])
