"""What the labs app calls: when a session ends (``settings.LAB_SESSION_ENDED_HOOKS``), and to
learn whether a course's members sign in through an LMS (``settings.ROSTER_COURSE_LMS``)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from labs import dispatch
from lti.models import Score
from lti.selectors import context_of_course
from lti.services import SCORE_TASK


def session_ended(session_id) -> None:
    """A session launched from an LMS link that posts scores has ended (this runs inside the
    transaction that ended it): its score becomes due in that transaction, and is sent to a
    worker once it commits. Should that send be lost, beat's sweep finds the score due."""
    due = Score.objects.filter(session_id=session_id, state=Score.State.PENDING, next_attempt_at__isnull=True)
    if due.update(next_attempt_at=timezone.now()):
        transaction.on_commit(lambda: dispatch.send(SCORE_TASK, str(session_id)), robust=True)


def course_lms(course) -> str:
    """The name of the LMS registration ``course`` is linked to (an LTI context), or ``""``: its
    members sign in through that LMS, so the roster import sends them no invitation."""
    context = context_of_course(course=course)
    return context.registration.name if context is not None else ""
