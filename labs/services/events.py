"""Push session changes to the pages that show them, after the change is committed.

Changes are sent per group, not per session: one message to each student's group and one to
each course's group, carrying every changed session of that group. Inside ``events_batch()``
(the controller and the allocation pass use it) the changes of many transactions are gathered
and sent once when the block ends, so a pass that admits 500 sessions sends a handful of
messages instead of a thousand. Nothing is sent for a transaction that rolls back.

A session that leaves its course's queue (admitted, refused, cancelled) moves the sessions
behind it up a place: their current state goes out with it (``sessions_for_events``), in the
same per-group messages, so a pass that admits 128 still sends one message per group.

A message carries the reason as a code and parameters; each consumer renders it in the
language of its own reader.

Session events (``session_event``: queued, running, ended, usage recorded) do not wait for the
commit: the hooks in ``settings.LAB_SESSION_EVENT_HOOKS`` (the LMS webhooks) get them inside the
transaction of the change and write what they owe there (an outbox), so the change and its events
commit together or not at all. A process that dies after the commit loses none (an event sent
after it would be lost with the process); a rollback leaves none behind. A change of many
sessions (``sessions_transition``: a controller pass) makes one call with all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.utils import timezone, translation
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)

_batch: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("session_events_batch", default=None)


@dataclass(frozen=True)
class SessionEvent:
    """Something an outside system may want to hear about: ``kind`` is ``session.queued``,
    ``session.running``, ``session.active`` (the idle check saw the lab used), ``session.ended``
    or ``usage.recorded``; ``at`` is when it happened."""

    kind: str
    session_id: str
    at: datetime


def student_group(user_id: int) -> str:
    return f"student.{user_id}"


def course_group(course_id: int) -> str:
    return f"course.{course_id}"


def session_changes_publish(session_ids: Iterable[object], *, queues_moved: bool = True) -> None:
    """Send the current state of these sessions to their pages once the transaction commits.

    ``queues_moved=False``: the caller knows none of them has just left its course's queue (a
    move to starting, running or stopping; a progress note), so the sessions queued behind them
    kept their places and the read that sends them skips looking for them (about a third of a
    web stop's publish). Inside ``events_batch()`` the batch's read looks for them anyway.
    """
    ids = {str(i) for i in session_ids}
    if not ids:
        return
    batch = _batch.get()
    if batch is not None:
        transaction.on_commit(lambda: batch.update(ids))
    else:
        transaction.on_commit(lambda: _send(ids, queues_moved=queues_moved), robust=True)


def session_event(kind: str, session_id: object) -> None:
    """Record a session event inside the transaction of the change (``session_events_record``)."""
    session_events_record(kind, [session_id])


def session_events_record(kind: str, session_ids: Iterable[object]) -> None:
    """Hand the event ``kind`` of these sessions to each of ``settings.LAB_SESSION_EVENT_HOOKS``,
    now, inside the caller's transaction, which must be open: a hook writes what it owes (an
    outbox row) in it, and whatever it sends waits for the commit. A hook that fails fails the
    change: it rolls back rather than commit without its event."""
    now = timezone.now()
    events = [SessionEvent(kind, str(session_id), now) for session_id in session_ids]
    if not events:
        return
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("session events are recorded inside the transaction of the change they tell of")
    for hook in _event_hooks():
        hook(events)


@contextlib.contextmanager
def events_batch() -> Iterator[None]:
    """Gather the page updates committed inside the block; send them, grouped, when it ends."""
    if _batch.get() is not None:
        yield  # already inside a batch: the outer one sends
        return
    pending: set[str] = set()
    token = _batch.set(pending)
    try:
        yield
    finally:
        _batch.reset(token)
        if pending:
            _send(pending)


def events_flush() -> None:
    """Inside ``events_batch()``, outside any transaction: send the page updates committed so far now.

    A long controller round calls it between its phases, so the pages hear of admissions
    and of labs that are running as they happen, not when the round ends."""
    pending = _batch.get()
    if not pending:
        return
    ids = set(pending)
    pending.clear()
    _send(ids)


@lru_cache(maxsize=1)
def _event_hooks() -> tuple:
    return tuple(import_string(path) for path in settings.LAB_SESSION_EVENT_HOOKS)


def _send(session_ids: set[str], *, queues_moved: bool = True) -> None:
    from labs.selectors.sessions import queue_facts, session_event_payload_pairs, sessions_for_events

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        messages: dict[str, list[dict]] = defaultdict(list)
        sessions = sessions_for_events(session_ids, queues_moved=queues_moved)
        for session, (owners, others) in zip(sessions, session_event_payload_pairs(sessions, queue_facts(sessions)), strict=True):
            messages[student_group(session.student_id)].append(owners)
            messages[course_group(session.course_id)].append(others)
        # The cluster page shows the cards' shares: they change when a session is admitted (its
        # allocation made; by the time a batch is sent it may be starting or running already)
        # or ends (released), not when one queues or is being stopped: a launch or a stop from
        # the web does not send it a message.
        cards = any(s.state not in SHARE_UNCHANGED for s in sessions if str(s.pk) in session_ids)
        # The words are in this process's language: a socket whose reader has the same one
        # sends them as they are (``labs.consumers``), the others render them again.
        async_to_sync(_send_all)(layer, messages, cards, translation.get_language())
    except Exception:
        # A page misses a live update; the state itself is committed and the next page load
        # shows it. Never let a Redis hiccup undo or fail a state change.
        logger.warning("could not publish session updates", exc_info=True)


async def _send_all(layer, messages: dict[str, list[dict]], cards: bool, language: str | None) -> None:
    """Every group's message, started together: the portal's layer (``portal.channel_layer``) sends
    the publishes started in one turn of the event loop in one round trip to Redis."""
    sends = [layer.group_send(group, sessions_message(sessions, language)) for group, sessions in messages.items()]
    if cards:  # the operators' cluster page reads it again
        sends.append(layer.group_send(CLUSTER_GROUP, {"type": "cluster.changed"}))
    for outcome in await asyncio.gather(*sends, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome


def sessions_message(sessions: list[dict], language: str | None) -> dict:
    """A group's ``sessions.update``: the page's message already as JSON text, written once here.

    Every socket of the group whose reader has ``language`` sends the text as it is
    (``labs.consumers.SessionUpdatesConsumer``); each used to decode the sessions from the layer's
    msgpack and encode them as JSON again, on the web process's event loop. A reader of another
    language decodes the text and has the words rendered again."""
    text = orjson.dumps({"type": "sessions", "sessions": sessions}).decode()
    return {"type": "sessions.update", "text": text, "language": language}


# States a session reaches without taking or giving back a card share.
SHARE_UNCHANGED = frozenset({"queued", "stopping"})


CLUSTER_GROUP = "cluster"


def cluster_changed_publish() -> None:
    """Tell the cluster pages, once the transaction commits, that cards, nodes or their use changed."""
    transaction.on_commit(_send_cluster_changed, robust=True)


def _send_cluster_changed() -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(CLUSTER_GROUP, {"type": "cluster.changed"})
    except Exception:
        logger.warning("could not publish a cluster change", exc_info=True)
