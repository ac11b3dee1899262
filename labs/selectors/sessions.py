"""Reads of lab sessions, always scoped to the user asking."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache, lru_cache
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from labs.domain.lifecycle import session_deadline, session_limit_minutes
from labs.domain.queue import QUOTA_BOUND_CODES, release_at, wait_estimate_seconds
from labs.domain.states import ACTIVE, HOLDS_ALLOCATION, TERMINAL, SessionState
from labs.models import BudgetGrant, Course, Enrollment, LabSession
from labs.presentation import card_lines, extend_label, selftest_text, share_text, smaller_offer_text
from labs.selectors.rows import column, listed, marks, one, one_of, table
from labs.selectors.session_read import sessions_read

logger = logging.getLogger(__name__)

RECENT_ENDED = 5


@dataclass(frozen=True)
class QueueFacts:
    """Where a queued session stands in its course's queue; ``wait_seconds`` is ``None`` when unknown."""

    position: int
    length: int
    wait_seconds: int | None


def _with_relations(qs: QuerySet[LabSession]) -> QuerySet[LabSession]:
    return qs.select_related("template", "course__quota", "student", "allocation__card__node")


def sessions_for_events(session_ids: Iterable[str], *, queues_moved: bool = True) -> list[LabSession]:
    """The changed sessions, and the still-queued sessions whose places one of them moved.

    A session that leaves a queue moves everyone behind it up a place, so their pages are told
    too; queued sessions of other courses, and those ahead of a cancelled one, keep their places
    and are not read (``_events_where_sql``). With
    ``queues_moved=False`` (the caller knows none of them has left a queue) only the changed ones
    are read. One statement either way (``session_read.sessions_read``).
    """
    pk = LabSession._meta.pk
    ids = {pk.to_python(i) for i in session_ids}
    if not ids:
        return []
    count, keys = listed([pk.get_db_prep_value(i, connection) for i in ids])
    if queues_moved:
        queued, admitted = SessionState.QUEUED.value, SessionState.ADMITTED.value
        params = [*keys, queued, *keys, admitted, *keys, *_terminal_values(), queued]
    else:
        params = keys
    found = sessions_read(_events_where_sql(count, queues_moved), params)
    return [s for s in found if s.pk in ids] + [s for s in found if s.pk not in ids]


@cache
def _terminal_values() -> tuple[str, ...]:
    return tuple(sorted(state.value for state in TERMINAL))


@lru_cache(maxsize=256)  # one per number of sessions (on SQLite) and whether queues moved
def _events_where_sql(count: int | None, queues_moved: bool) -> str:
    """The changed sessions (by id: ``rows.one_of(count)``) and, when ``queues_moved``, the queued
    sessions whose places one of them has just moved: every queued session of a course where one
    was admitted (its allocation may change the wait of any of them), and those queued behind one
    that ended without an admission (a cancel: the sessions ahead of it keep their places and
    their waits, and are neither read nor sent again; behind in the allocation pass's order,
    ``queue_at`` then ``id``). An end after an admission left the queue at the admission.

    Each part is a subquery of its own, not correlated with the outer row: PostgreSQL reads each
    once (a correlated ``EXISTS`` in the ``OR`` was run for every row). Parameters: the ids
    (``rows.listed``); the queued state; the ids again and the admitted state; the ids again, the
    terminal states and the queued state."""
    s = lambda name: column(LabSession, name, "s")  # noqa: E731
    m = lambda name: column(LabSession, name, "m")  # noqa: E731
    q = lambda name: column(LabSession, name, "q")  # noqa: E731
    changed = f"{s('id')} {one_of(count)}"
    if not queues_moved:
        return changed
    admitted = f"SELECT {m('course')} FROM {table(LabSession, 'm')} WHERE {m('id')} {one_of(count)} AND {m('state')} = %s"
    # The cancelled sessions found by their keys first (``OFFSET 0``: PostgreSQL plans the
    # subquery on its own, not folded into the join), then the queue behind each through its
    # course's index: planned from the statistics of a class's first minutes, which say the queue
    # is empty, the join went the other way and read every cancelled candidate for every queued
    # session (12–19 ms with 400 queued, against 1 ms).
    fence = " OFFSET 0" if connection.vendor == "postgresql" else ""
    cancelled = (
        f"SELECT {m('course')}, {m('queue_at')}, {m('id')} FROM {table(LabSession, 'm')}"
        f" WHERE {m('id')} {one_of(count)} AND {m('state')} IN ({marks(len(TERMINAL))}) AND {m('admitted_at')} IS NULL{fence}"
    )
    behind = (
        f"SELECT {q('id')} FROM {table(LabSession, 'q')} INNER JOIN ({cancelled}) m ON {m('course')} = {q('course')}"
        f" WHERE {q('state')} = %s AND ({m('queue_at')} IS NULL OR {_ahead_sql('m', 'q')})"
    )
    return f"({changed} OR ({s('state')} = %s AND {s('course')} IN ({admitted})) OR {s('id')} IN ({behind}))"


def _ahead_sql(first: str, then: str) -> str:
    """SQL true when the session aliased ``first`` is ahead of ``then`` in its course's queue: the
    allocation pass's order, ``queue_at`` then ``id``."""
    a = lambda name: column(LabSession, name, first)  # noqa: E731
    b = lambda name: column(LabSession, name, then)  # noqa: E731
    return f"{a('queue_at')} < {b('queue_at')} OR ({a('queue_at')} = {b('queue_at')} AND {a('id')} < {b('id')})"


def sessions_of_student(*, user) -> list[LabSession]:
    """The student's open sessions, then their few most recently ended ones.

    Each carries ``card``: its ``session_event_payload`` (the owner's), read in bulk, which is
    what the page draws the card from. One statement for both (``session_read.sessions_read``;
    the student is the user: not joined again).
    """
    terminal = _terminal_values()
    rows = sorted(
        sessions_read(_student_where_sql(), [user.pk, *terminal, user.pk, *terminal, RECENT_ENDED], student=user),
        key=lambda s: s.created_at,
        reverse=True,
    )
    open_sessions = [s for s in rows if s.state not in TERMINAL]
    ended = sorted((s for s in rows if s.state in TERMINAL), key=lambda s: s.ended_at, reverse=True)  # never null
    sessions = open_sessions + ended
    for session, payload in zip(sessions, session_event_payloads(sessions, for_owner=True), strict=True):
        session.card = payload
    return sessions


@cache
def _student_where_sql() -> str:
    """The student's sessions not ended, and their latest ended ones. Parameters: the student,
    the terminal states, the student, the terminal states, how many ended ones."""
    s = lambda name: column(LabSession, name, "s")  # noqa: E731
    r = lambda name: column(LabSession, name, "r")  # noqa: E731
    terminal = marks(len(TERMINAL))
    latest = (
        f"SELECT {r('id')} FROM {table(LabSession, 'r')}"
        f" WHERE {r('student')} = %s AND {r('state')} IN ({terminal}) ORDER BY {r('ended_at')} DESC LIMIT %s"
    )
    return f"{s('student')} = %s AND ({s('state')} NOT IN ({terminal}) OR {s('id')} IN ({latest}))"


def session_for_user(*, user, session_id) -> LabSession | None:
    """The session if ``user`` owns it or teaches its course; ``None`` otherwise."""
    read_at = time.time()
    session = one(_with_relations(LabSession.objects.filter(pk=session_id)).filter(_owned_or_taught(user)))
    if session is not None:
        session.read_at = read_at
    return session


def read_at_ms(session: LabSession) -> float:
    """When ``session`` was read, in ms since the epoch (to the microsecond): taken just before
    the read (``read_at``, set by the selectors that read sessions for payloads), else now.

    A page keeps, of two payloads with one ``version``, the one with the later ``read_at_ms``
    (a queue place changes without the session's row). Stamped before the read, a payload read
    before a change commits is always older than the message sent for that change; stamped
    after it, a slow request's stale payload could arrive after the message and win (a queued
    card left at its old place)."""
    at = getattr(session, "read_at", None)
    return round((time.time() if at is None else at) * 1000, 3)


def session_of_user_exists(*, user, session_id) -> bool:
    """Whether ``session_for_user`` would find the session (without reading it).

    Written out (``_owned_or_taught_sql``): every stop asks it, and composing the ORM's OR over a
    subquery cost several times running it (docs/framework-overrides.md)."""
    pk = LabSession._meta.pk
    try:
        session_pk = pk.get_db_prep_value(pk.to_python(session_id), connection)
    except ValidationError:
        return False  # not a session id at all
    roles = sorted(Enrollment.STAFF_ROLES)
    with connection.cursor() as cursor:
        cursor.execute(_owned_or_taught_sql(len(roles)), [session_pk, user.pk, user.pk, *roles])
        return cursor.fetchone() is not None


@lru_cache(maxsize=8)
def _owned_or_taught_sql(roles: int) -> str:
    """The session (by id) if its student is the user or the user holds one of the staff roles
    in its course. Parameters: the session id, the user twice, the roles."""
    s = lambda name: column(LabSession, name, "s")  # noqa: E731
    e = lambda name: column(Enrollment, name, "e")  # noqa: E731
    return (
        f"SELECT 1 FROM {table(LabSession, 's')} WHERE {s('id')} = %s AND ({s('student')} = %s"
        f" OR {s('course')} IN (SELECT {e('course')} FROM {table(Enrollment, 'e')}"
        f" WHERE {e('user')} = %s AND {e('role')} IN ({marks(roles)})))"
    )


@dataclass(frozen=True)
class LaunchFacts:
    """What a launch checks about the sessions and templates of its course, read in one statement."""

    offered: bool  # the template is one of the course's
    open_sessions: int  # the student's sessions in the course that have not ended
    prestarted: bool  # a lab pre-started for a class of the course, with that template, waits unclaimed
    granted: tuple[int, int]  # the week's budget grants to the student in the course: AI-Core-% x hours, GiB x hours


# The states of a pre-started lab a student may be handed (``services.sessions._prestarted_claim``).
CLAIMABLE = (SessionState.QUEUED, SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING)


def launch_facts(*, student_id: int, course_id: int, template_id: int, week: date) -> LaunchFacts:
    """:class:`LaunchFacts` for a student launching ``template_id`` in ``course_id``, with the
    grants of the week that begins on ``week`` (``labs.selectors.usage.week_start``).

    Written out (``_launch_facts_sql``): composed by the ORM these were three queries on every
    launch, each costing several times more to compose than to run (docs/framework-overrides.md);
    the week's grants, which the budget check adds to the course's budget, were one more statement."""
    active = sorted(state.value for state in ACTIVE)
    claimable = [state.value for state in CLAIMABLE]
    monday = BudgetGrant._meta.get_field("week_start").get_db_prep_value(week, connection)
    grants = [course_id, student_id, monday]
    params = [course_id, template_id, student_id, course_id, *active, course_id, template_id, *claimable, *grants, *grants]
    with connection.cursor() as cursor:
        cursor.execute(_launch_facts_sql(), params)
        offered, open_sessions, prestarted, core_hours, gib_hours = cursor.fetchone()
    # SQLite answers 0 and 1 for the booleans
    return LaunchFacts(bool(offered), int(open_sessions), bool(prestarted), (int(core_hours), int(gib_hours)))


@cache
def _launch_facts_sql() -> str:
    """Parameters: course, template; student, course, the active states; course, template, the
    claimable states; course, student, the week's Monday, twice."""
    quote = connection.ops.quote_name
    offered = Course._meta.get_field("templates")
    s = lambda name: column(LabSession, name)  # noqa: E731
    g = lambda name: column(BudgetGrant, name)  # noqa: E731
    sessions = table(LabSession)
    grants = f"FROM {table(BudgetGrant)} WHERE {g('course')} = %s AND {g('student')} = %s AND {g('week_start')} = %s"
    return (
        f"SELECT EXISTS (SELECT 1 FROM {quote(offered.m2m_db_table())}"
        f" WHERE {quote(offered.m2m_column_name())} = %s AND {quote(offered.m2m_reverse_name())} = %s),"
        f" (SELECT COUNT(*) FROM {sessions} WHERE {s('student')} = %s AND {s('course')} = %s"
        f" AND {s('state')} IN ({marks(len(ACTIVE))})),"
        f" EXISTS (SELECT 1 FROM {sessions} WHERE {s('course')} = %s AND {s('template')} = %s"
        f" AND {s('reservation_slot')} IS NOT NULL AND {s('claimed_at')} IS NULL AND {s('state')} IN ({marks(len(CLAIMABLE))})),"
        f" (SELECT COALESCE(SUM({g('core_percent_hours')}), 0) {grants}),"
        f" (SELECT COALESCE(SUM({g('gib_hours')}), 0) {grants})"
    )


def _owned_or_taught(user) -> Q:
    staff_courses = Enrollment.objects.filter(user=user, role__in=Enrollment.STAFF_ROLES).values("course_id")
    return Q(student=user) | Q(course_id__in=staff_courses)


def queue_facts(sessions: Sequence[LabSession], *, now: float | None = None) -> dict[Any, QueueFacts]:
    """Queue position, queue length and wait estimate of each queued session among ``sessions``, by pk.

    The position counts the course's queued sessions in the order the allocation pass takes
    them (``queue_at``: the launch time pushed back by the student's recent usage, then ``id``).
    The wait is ``labs.domain.queue.wait_estimate_seconds``: only when the course's quota is
    full, from when the course's sessions end at the latest.
    Two queries at most, however many sessions.
    """
    queued = [s for s in sessions if s.state == SessionState.QUEUED]
    if not queued:
        return {}
    now = timezone.now().timestamp() if now is None else now
    places_by_pk = _queue_places([s.pk for s in queued])

    by_pk = {s.pk: s for s in queued}
    quota_bound = {by_pk[pk].course_id for pk in places_by_pk if by_pk[pk].reason_code in QUOTA_BOUND_CODES}
    releases: dict[int, list[float | None]] = defaultdict(list)
    if quota_bound:
        holding = LabSession.objects.filter(course_id__in=quota_bound, state__in=HOLDS_ALLOCATION).values_list(
            "course_id", "state", "running_at", "template__max_lifetime_minutes", "course__quota__max_session_minutes"
        )
        for course_id, state, running_at, template_minutes, course_minutes in holding:
            releases[course_id].append(
                release_at(
                    state,
                    running_at=running_at.timestamp() if running_at else None,
                    limit_minutes=session_limit_minutes(template_minutes, course_minutes),
                    now=now,
                )
            )
    facts = {}
    for pk, (position, length) in places_by_pk.items():
        session = by_pk[pk]
        wait = wait_estimate_seconds(
            position=position, reason_code=session.reason_code, releases=releases.get(session.course_id, ()), now=now
        )
        facts[pk] = QueueFacts(position, length, wait)
    return facts


def _queue_places(pks: list) -> dict[Any, tuple[int, int]]:
    """``pk -> (position, length)`` of those of ``pks`` still queued, in one statement.

    Written out (tables and columns from the model) rather than composed: the ORM's two
    ``Subquery`` of ``OuterRef`` cost several times more to build than to run,
    and this runs on every launch and every publish of a queued session. The order is the
    allocation pass's: ``queue_at``, then ``id``. One session (a launch's answer): the sessions
    ahead of it counted (``_queue_place_sql``); several (a publish): their courses' queues
    numbered once (``_queue_places_sql``).
    """
    field = LabSession._meta.pk
    queued = SessionState.QUEUED.value
    with connection.cursor() as cursor:
        if len(pks) == 1:
            states = 1 if connection.vendor == "postgresql" else 2  # the queue read once, or twice
            cursor.execute(_queue_place_sql(), [queued] * states + [field.get_db_prep_value(pks[0], connection)])
            found = cursor.fetchone()
            if found is None or found[0] != queued:
                return {}
            _, ahead, length = found
            return {field.to_python(pks[0]): (ahead + 1, length)}
        count, params = listed([field.get_db_prep_value(pk, connection) for pk in pks])
        cursor.execute(_queue_places_sql(count), [queued, *params, *params])
        return {field.to_python(pk): (position, length) for pk, position, length in cursor.fetchall()}


@cache
def _queue_place_sql() -> str:
    """One session's state, the queued sessions ahead of it in its course and its course's queue.
    For one session cheaper than numbering the queue (no sort). The session is found by its key
    alone and its state compared by the caller: with the state in the same condition, PostgreSQL
    could look it up through the state's index instead, under a plan made while the class was
    small, and read the queue once more to find it. On PostgreSQL the queue is counted once for
    both figures (a ``LATERAL`` subquery; 0.17 ms of its time with 800 queued, against 0.28 read
    twice, once per figure, as SQLite, which has no ``LATERAL``, reads it). Parameters: the queued
    state (twice on SQLite), the id."""
    sessions = table(LabSession)
    pk, course, state = (column(LabSession, name) for name in ("id", "course", "state"))
    ahead = _ahead_sql("q", "s")
    queue = f"FROM {sessions} q WHERE q.{course} = s.{course} AND q.{state} = %s"
    if connection.vendor == "postgresql":
        return f"""
            SELECT s.{state}, c.ahead, c.length
            FROM {sessions} s, LATERAL (SELECT COUNT(*) FILTER (WHERE {ahead}) AS ahead, COUNT(*) AS length {queue}) c
            WHERE s.{pk} = %s
        """
    return f"""
        SELECT s.{state}, (SELECT COUNT(*) {queue} AND ({ahead})), (SELECT COUNT(*) {queue})
        FROM {sessions} s
        WHERE s.{pk} = %s
    """


@lru_cache(maxsize=256)  # one statement per number of sessions asked about (on SQLite)
def _queue_places_sql(count: int | None) -> str:
    """Each course's queue read once, numbered in the pass's order (a window over the course's
    queued sessions), however many of its sessions are asked about: counted as for one session
    (``_queue_place_sql``), a publish of k queued sessions read their queue 2k times (300 of a
    queue of 500: about 200 ms of PostgreSQL's time, against 1.1 ms numbered). Parameters: the
    queued state, then the ids twice (``rows.listed``)."""
    sessions = table(LabSession)
    pk, course, state, queue_at = (column(LabSession, name) for name in ("id", "course", "state", "queue_at"))
    asked = f"SELECT s.{course} FROM {sessions} s WHERE s.{pk} {one_of(count)}"
    # The asked sessions' courses found once, by their keys (whatever their state: a course too
    # many is only numbered for nothing), before any queue is read: as a join PostgreSQL may
    # look them up again for every queued session (a plan made while the table was small: 67 ms
    # with 500 queued). SQLite has no ARRAY(); its IN (subquery) is read once.
    courses = f"= ANY(ARRAY({asked}))" if connection.vendor == "postgresql" else f"IN ({asked})"
    return f"""
        SELECT p.{pk}, p.position, p.length FROM (
            SELECT q.{pk},
                ROW_NUMBER() OVER (PARTITION BY q.{course} ORDER BY q.{queue_at}, q.{pk}) AS position,
                COUNT(*) OVER (PARTITION BY q.{course}) AS length
            FROM {sessions} q
            WHERE q.{state} = %s AND q.{course} {courses}
        ) p
        WHERE p.{pk} {one_of(count)}
    """


def session_stops_at(session: LabSession) -> float | None:
    """When this running session will be stopped (seconds since the epoch): at its maximum length
    (the controller's deadline), or sooner if it was warned of a reclaim (``reclaim_at``) or its
    student's budget is used up (``budget_stop_at``) or it was warned as idle (``cull_at``)."""
    if session.state != SessionState.RUNNING or session.running_at is None:
        return None
    quota = getattr(session.course, "quota", None)
    limit = session_limit_minutes(
        session.template.max_lifetime_minutes,
        quota.max_session_minutes if quota else None,
        session.extensions_used * quota.extension_minutes if quota else 0,
    )
    deadline = session_deadline(session.running_at.timestamp(), limit)
    for stop in (session.reclaim_at, session.budget_stop_at, session.cull_at):
        if stop is not None:
            deadline = stop.timestamp() if deadline is None else min(deadline, stop.timestamp())
    return deadline


def session_event_payloads(sessions: Sequence[LabSession], *, for_owner: bool) -> list[dict[str, Any]]:
    """``session_event_payload`` of each session, with the queue facts read once for all of them."""
    facts = queue_facts(sessions)
    return [session_event_payload(s, for_owner=for_owner, queue=facts.get(s.pk)) for s in sessions]


def session_event_payload(
    session: LabSession, *, for_owner: bool, queue: QueueFacts | None = None, read_queue: bool = True
) -> dict[str, Any]:
    """What a page needs to draw a session card. Only the owner gets the access URL (it holds the secret).

    Times are ISO 8601: ``started_at`` when the lab began starting (``started_shown``: a lab
    pre-started for a class, from its hand-over), ``stops_at`` (only while running) the deadline
    the controller stops it at (``session_stops_at``). ``queue_position`` (1-based),
    ``queue_length`` and ``wait_seconds`` only while queued; ``wait_seconds`` is ``None`` when
    there is no honest estimate (``queue_facts``). ``read_at_ms`` is when this was read (just
    before: ``read_at_ms``): of two payloads with one ``version``, the later read has the
    fresher queue position. Words (``state_label``, ``reason``, ``share_text``, the card's timed ``lines``:
    ``labs.presentation.card_line``) are in the active language; the websocket consumer renders
    them again for each reader (``labs.consumers.localised``).
    ``read_queue=False``: no queue facts unless given (``queue``), and so no read for them.
    """
    if queue is None and read_queue and session.state == SessionState.QUEUED:
        queue = queue_facts([session]).get(session.pk)
    others = _others_payload(session, queue, {})
    return _owners_payload(session, others, {}) if for_owner else others


def session_event_payload_pairs(
    sessions: Sequence[LabSession], queues: dict[Any, QueueFacts]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(owner's, others')`` ``session_event_payload`` of each session, ``queues`` its queue facts
    by pk (``queue_facts``; none read here).

    What a published change sends to the student's and the course's pages, built once for both
    (they differ only in what the owner alone sees) and with the words every card of one
    template shares composed once: a controller round publishes hundreds of sessions.
    """
    words: dict[tuple, str] = {}
    pairs = []
    for session in sessions:
        others = _others_payload(session, queues.get(session.pk), words)
        pairs.append((_owners_payload(session, others, words), others))
    return pairs


def _others_payload(session: LabSession, queue: QueueFacts | None, words: dict[tuple, str]) -> dict[str, Any]:
    """``session_event_payload`` for anyone but the owner; ``words`` keeps the texts composed so
    far (one language throughout)."""
    allocation = getattr(session, "allocation", None)
    placement = ""
    if allocation is not None and allocation.released_at is None:
        placement = allocation.placement
    stops_at = session_stops_at(session)
    started = started_shown(session)
    quota = getattr(session.course, "quota", None)
    template = session.template
    share = (template.core_percent, template.memory_mib, template.card_count)
    selftest = (session.selftest_visible_mib, session.selftest_over_cap)
    payload = {
        "id": str(session.pk),
        "version": session.version,
        "read_at_ms": read_at_ms(session),
        "state": session.state,
        "state_label": _said(words, ("state", session.state), lambda: str(LabSession.State(session.state).label)),
        "reason": session.reason,
        "reason_code": session.reason_code,
        "reason_params": session.reason_params,
        "template": template.name,
        "course_id": session.course_id,
        "course": session.course.code,
        "student": session.student.get_username(),
        "core_percent": template.core_percent,
        "memory_mib": template.memory_mib,
        "cards": template.card_count,
        "share_text": _said(words, ("share", *share), lambda: share_text(*share)),
        "selftest_visible_mib": session.selftest_visible_mib,
        "selftest_over_cap": session.selftest_over_cap,
        "selftest_text": _said(words, ("selftest", *selftest), lambda: selftest_text(*selftest)),
        "placement": placement,
        "can_stop": session.can_stop,
        "access_url": "",
        "created_at": session.created_at.isoformat(),
        "started_at": started.isoformat() if started else None,
        "stops_at": _iso(stops_at),
        "extensions_left": 0,
        "extension_minutes": quota.extension_minutes if quota is not None else 0,
        "extend_label": "",
        # Warned as idle: the owner's card offers "Keep running".
        "can_keep": False,
        "queue_position": queue.position if queue else None,
        "queue_length": queue.length if queue else None,
        "wait_seconds": queue.wait_seconds if queue else None,
    }
    payload["lines"] = card_lines(payload)  # from what everyone sees: the same lines for the owner
    return payload


def _owners_payload(session: LabSession, others: dict[str, Any], words: dict[tuple, str]) -> dict[str, Any]:
    """The owner's ``session_event_payload``: ``others`` (``_others_payload``) with what only the owner sees."""
    running = session.state == SessionState.RUNNING
    quota = getattr(session.course, "quota", None)
    extensions_left = 0
    if running and quota is not None and session.reclaim_at is None:
        extensions_left = max(0, quota.extensions_allowed - session.extensions_used)
    extend = ""
    if extensions_left:
        extend = _said(words, ("extend", quota.extension_minutes), lambda: extend_label(quota.extension_minutes))
    # Queued for capacity with a smaller template that would start now (labs.domain.offers).
    offer = (session.smaller_offer or None) if session.state == SessionState.QUEUED else None
    return {
        **others,
        "access_url": session.access_url if running else "",
        "extensions_left": extensions_left,
        "extend_label": extend,
        "can_keep": running and session.cull_at is not None,
        "smaller_offer": offer,
        "smaller_offer_text": _said(words, ("offer", *sorted(offer.items())), lambda: smaller_offer_text(offer)) if offer else "",
    }


def _said(words: dict[tuple, str], key: tuple, compose) -> str:
    """The text ``compose()`` gives, composed once per ``key`` for as long as ``words`` is kept."""
    text = words.get(key)
    if text is None:
        text = words[key] = compose()
    return text


def session_launched_payload(session: LabSession) -> dict[str, Any]:
    """``session_event_payload`` of a session whose launch has just committed, for the page that
    launched it, drawn from the launch's own row (the service returns it with its template,
    course, quota and student, and its allocation if it has one).

    Only its place in the queue is read, after the commit. When that read fails (the database
    went away just then) the payload goes without the place, and the log says so: the launch
    happened and is answered as one (the lab starts; a 500 would have the student click again
    and be told a session is open already), and the page's next update brings the place.
    """
    try:
        queue = queue_facts([session]).get(session.pk)
    except DatabaseError:
        logger.warning("session %s was launched; its place in the queue could not be read", session.pk, exc_info=True)
        queue = None
    return session_event_payload(session, for_owner=True, queue=queue, read_queue=False)


def started_shown(session: LabSession) -> datetime | None:
    """When the student's lab started, as their card says it: when it began starting, or, for a
    lab pre-started for a class that was handed over later, the hand-over (``claimed_at``), from
    which its lifetime and the student's usage count too. ``None`` before it starts."""
    started, claimed = session.started_at, session.claimed_at
    if started is not None and claimed is not None and claimed > started:
        return claimed
    return started


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat()
