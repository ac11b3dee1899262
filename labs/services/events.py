"""Push session changes to the pages that show them, after the change is committed."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def student_group(user_id: int) -> str:
    return f"student.{user_id}"


def course_group(course_id: int) -> str:
    return f"course.{course_id}"


def session_changes_publish(session_ids: Iterable[object]) -> None:
    """Queue a websocket event per session, sent once the current transaction commits."""
    ids = [str(i) for i in session_ids]
    if ids:
        transaction.on_commit(lambda: _send(ids))


def _send(session_ids: list[str]) -> None:
    from labs.selectors.sessions import session_event_payload, sessions_for_events

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        for session in sessions_for_events(session_ids):
            owner_view = session_event_payload(session, for_owner=True)
            staff_view = session_event_payload(session, for_owner=False)
            async_to_sync(layer.group_send)(student_group(session.student_id), {"type": "session.update", "session": owner_view})
            async_to_sync(layer.group_send)(course_group(session.course_id), {"type": "session.update", "session": staff_view})
    except Exception:
        # A page misses a live update; the state itself is committed and the next page load
        # shows it. Never let a Redis hiccup undo or fail a state change.
        logger.warning("could not publish session updates", exc_info=True)
