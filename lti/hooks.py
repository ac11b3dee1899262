"""What the labs app calls when a session ends (``settings.LAB_SESSION_ENDED_HOOKS``)."""

from __future__ import annotations

from django.db import transaction

from labs import dispatch
from lti.models import Score

SCORE_TASK = "lti.tasks.score_post"


def session_ended(session_id) -> None:
    """A session launched from an LMS link that posts scores: send its score once the end commits."""
    if Score.objects.filter(session_id=session_id, state=Score.State.PENDING).exists():
        transaction.on_commit(lambda: dispatch.send(SCORE_TASK, str(session_id)), robust=True)
