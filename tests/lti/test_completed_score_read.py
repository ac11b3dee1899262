"""``lti.selectors.completed_score_waits``, the written-out check every end of a session makes
(``lti.grading.session_completed``), answers as the ORM's filter it stands for: a pending
``Completed`` row of that session with no attempt set, and nothing else."""

from __future__ import annotations

import pytest
from django.utils import timezone

from labs.services.sessions import session_launch
from lti.models import ActivityProgress, Context, ResourceLink, Score
from lti.selectors import completed_score_waits
from tests.factories import lti_registration

pytestmark = pytest.mark.django_db


def _orm_answer(session_id) -> bool:
    return Score.objects.filter(
        session_id=session_id,
        activity_progress=ActivityProgress.COMPLETED,
        state=Score.State.PENDING,
        next_attempt_at__isnull=True,
    ).exists()


@pytest.mark.parametrize(
    ("fields", "waits"),
    [
        (None, False),  # no score at all: most sessions
        ({}, True),
        ({"next_attempt_at": "now"}, False),  # already due
        ({"state": Score.State.SENT}, False),
        ({"state": Score.State.FAILED}, False),
        ({"activity_progress": ActivityProgress.STARTED}, False),
        ({"other_session": True}, False),
    ],
)
def test_the_written_out_check_answers_as_the_orm(world, fields, waits):
    course = world["course"]
    session, other = (session_launch(student=s, course=course, template=world["small"]) for s in world["students"][:2])
    if fields is not None:
        registration = lti_registration(course.institution)
        context = Context.objects.create(registration=registration, context_id="ctx-1", course=course)
        link = ResourceLink.objects.create(context=context, resource_link_id="link-1", score_on_end=True)
        fields = dict(fields)
        owner = other if fields.pop("other_session", False) else session
        if fields.get("next_attempt_at") == "now":
            fields["next_attempt_at"] = timezone.now()
        Score.objects.create(session=owner, resource_link=link, subject="student-1", **fields)

    assert completed_score_waits(session.pk) is waits
    assert completed_score_waits(str(session.pk)) is waits  # the id as a hook is handed it
    assert _orm_answer(session.pk) is waits
