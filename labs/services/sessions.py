"""Write paths of a lab session: launch, stop, and every state change.

Each public function is one transaction. State changes are conditional UPDATEs on the current
state (``session_transition``), so when two processes race — a worker starting a session while
the student stops it — exactly one wins and the other sees it did not.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from labs.dispatch import controller_wake, session_ended
from labs.domain.fairness import queue_delay_seconds
from labs.domain.reasons import Reason
from labs.domain.states import LEAVES_QUEUE, TERMINAL, SessionState, sources_of
from labs.models import Allocation, Course, Enrollment, LabSession, LabTemplate, UsageRecord
from labs.selectors.launch_read import enrollment_and_template_locked
from labs.selectors.rows import one
from labs.selectors.sessions import CLAIMABLE, launch_facts
from labs.selectors.usage import launch_usage, week_start
from labs.services.events import session_changes_publish, session_event, session_events_record
from labs.services.rows import row_insert, rows_update

_TIMESTAMP_OF = {
    SessionState.ADMITTED: "admitted_at",
    SessionState.STARTING: "started_at",
    SessionState.RUNNING: "running_at",
    SessionState.STOPPING: "stopping_at",
    SessionState.STOPPED: "ended_at",
    SessionState.FAILED: "ended_at",
}


class LaunchRefused(ValidationError):
    """A launch that was not accepted; nothing was created. The message says why."""


def reason_fields(reason: Reason | None) -> dict[str, object]:
    """The model fields that store ``reason`` (an empty reason when ``None``)."""
    if reason is None:
        return {"reason_code": "", "reason_params": {}}
    return {"reason_code": reason.code, "reason_params": reason.to_json()["params"]}


def session_transition(
    session_id,
    *,
    to: SessionState,
    reason: Reason | None = None,
    only_from: Iterable[SessionState] | None = None,
    **fields: object,
) -> bool:
    """Move a session to ``to`` if the state machine allows it from its current state.

    ``only_from`` narrows the allowed sources further. Other ``fields`` (``access_url``,
    ``end_state``, ...) are written in the same UPDATE. On a terminal state the session's
    allocation is released in the same transaction. Returns ``False`` — and changes nothing —
    when the session is not in an allowed source state (another process got there first).
    """
    with transaction.atomic():
        return _session_transition_in(session_id, to=to, reason=reason, only_from=only_from, **fields)


def _session_transition_in(
    session_id, *, to: SessionState, reason: Reason | None, only_from: Iterable[SessionState] | None, **fields: object
) -> bool:
    """``session_transition`` in the caller's transaction, without a savepoint of its own (a
    stop tries two moves in one transaction: each savepoint was two more round trips)."""
    sources, common = _transition_of(to, reason=reason, only_from=only_from)
    updates = {"version": F("version") + 1, **common, **fields}  # the caller's fields win, as they did
    updated = LabSession.objects.filter(pk=session_id, state__in=sources).update(**updates)
    if updated != 1:
        return False
    _transitioned([str(session_id)], to, release=lambda ids: allocation_release(ids[0]))
    return True


def sessions_transition(
    changes: dict[str, dict[str, object]],
    *,
    to: SessionState,
    reason: Reason | None = None,
    only_from: Iterable[SessionState] | None = None,
) -> set[str]:
    """``session_transition`` for many sessions at once, each with its own ``fields`` (``changes``
    maps a session id to them): the controller's rounds move hundreds of labs at a time.

    One transaction; the sessions in an allowed source state are locked and read, then written
    in one UPDATE (and one more for their own fields), their allocations released in a few
    statements (``allocations_release``). Returns the ids that moved; the others were not in an allowed state and are unchanged.
    PostgreSQL only takes the row locks this relies on: elsewhere (the embedded SQLite demo)
    it is ``session_transition`` once per session.
    """
    if not changes:
        return set()
    if connection.vendor != "postgresql":
        return {
            sid for sid, fields in changes.items() if session_transition(sid, to=to, reason=reason, only_from=only_from, **fields)
        }
    sources, common = _transition_of(to, reason=reason, only_from=only_from)
    with transaction.atomic():
        moved = [
            str(pk)
            for pk in LabSession.objects.select_for_update()
            .filter(pk__one_of=list(changes), state__in=sources)
            .order_by("pk")  # one lock order for every batch: two batches never deadlock
            .values_list("pk", flat=True)
        ]
        if not moved:
            return set()
        LabSession.objects.filter(pk__one_of=moved).update(version=F("version") + 1, **common)
        rows_update(LabSession, {sid: changes[sid] for sid in moved})
        _transitioned(moved, to, release=allocations_release)
    return set(moved)


def _transition_of(
    to: SessionState, *, reason: Reason | None, only_from: Iterable[SessionState] | None
) -> tuple[set[SessionState], dict[str, object]]:
    """The states a move to ``to`` may start from, and the fields every moved session gets (the
    state, its timestamp, the reason when one is given)."""
    sources = set(sources_of(to))
    if only_from is not None:
        sources &= set(only_from)
    fields: dict[str, object] = {"state": to}
    if to in _TIMESTAMP_OF:
        fields[_TIMESTAMP_OF[to]] = timezone.now()
    if reason is not None:
        fields.update(reason_fields(reason))
    return sources, fields


def _transitioned(session_ids: list[str], to: SessionState, *, release) -> None:
    """What follows sessions' move to ``to``, in its transaction: their events (one record for
    all of them); on an end, ``release`` of their allocations (whose usage events follow the
    ends) and the end hooks; and their pages told on commit."""
    if to == SessionState.RUNNING:
        session_events_record("session.running", session_ids)
    if to in TERMINAL:
        session_events_record("session.ended", session_ids)
        release(session_ids)
        for session_id in session_ids:
            session_ended(session_id)
    session_changes_publish(session_ids, queues_moved=to in LEAVES_QUEUE)


def session_relaunch(session_id, *, ref: str, reboot_at) -> bool:
    """Start a running or starting session's lab again on the allocation it holds: its node
    restarted (at ``reboot_at``, the node's ``rebooted_at``) and its instance ``ref`` stays failed
    now that the node reports its NPUs again.

    The session goes (back) to starting with no instance: its place, allocation and card are
    kept, the spawn deadline counts anew, and ``ref`` is recorded as the instance replaced, so
    the controller makes the new one only once that one is gone. One conditional UPDATE; returns
    ``False``, changing nothing, for a session in any other state (a stop came first).
    """
    fields = {
        "driver_ref": "",
        "replaced_ref": ref[:128],
        "reboot_at": reboot_at,
        "access_url": "",
        "create_attempts": 0,
        "retry_at": None,
        "lease_holder": "",
        "restarts": 0,
    }
    reason = Reason.of("session.node_restart_relaunching")
    with transaction.atomic():
        moved = _session_transition_in(
            session_id, to=SessionState.STARTING, reason=reason, only_from={SessionState.RUNNING}, **fields
        )
        if not moved:
            moved = bool(
                LabSession.objects.filter(pk=session_id, state=SessionState.STARTING).update(
                    **fields, **reason_fields(reason), started_at=timezone.now(), version=F("version") + 1
                )
            )
            if moved:
                session_changes_publish([str(session_id)], queues_moved=False)
        if moved:
            # The replaced instance's entity-id is no longer the allocation's; the new one is bound when made.
            Allocation.objects.filter(session_id=session_id, released_at__isnull=True).update(entity_id="")
    return moved


def session_note(session_id, *, reason: Reason, state: SessionState, **fields: object) -> bool:
    """Change the reason of a session still in ``state`` (progress messages); ``fields`` go in the same UPDATE."""
    stored = reason_fields(reason)
    with transaction.atomic():
        updated = (
            LabSession.objects.filter(pk=session_id, state=state)
            .exclude(**stored)
            .update(**stored, **fields, version=F("version") + 1)
        )
        if updated:
            session_changes_publish([session_id], queues_moved=False)  # a note moves no one
    return bool(updated)


def sessions_note(reasons: dict[str, Reason], *, state: SessionState) -> set[str]:
    """``session_note`` for many sessions (the controller's progress messages for a round's labs):
    one transaction, the rows locked and read, the changed ones written in two statements on
    PostgreSQL; ``session_note`` each elsewhere. Returns the ids whose reason changed."""
    if not reasons:
        return set()
    if connection.vendor != "postgresql":
        return {sid for sid, reason in reasons.items() if session_note(sid, reason=reason, state=state)}
    with transaction.atomic():
        stored = (
            LabSession.objects.select_for_update()
            .filter(pk__one_of=list(reasons), state=state)
            .order_by("pk")
            .values_list("pk", "reason_code", "reason_params")
        )
        changed = {}
        for pk, code, params in stored:
            fields = reason_fields(reasons[str(pk)])
            if (code, params) != (fields["reason_code"], fields["reason_params"]):
                changed[str(pk)] = fields
        if changed:
            LabSession.objects.filter(pk__one_of=list(changed)).update(version=F("version") + 1)
            rows_update(LabSession, changed)
            session_changes_publish(changed, queues_moved=False)
    return set(changed)


def allocation_release(session_id) -> bool:
    """Release the session's allocation and write its usage records, in the caller's transaction.

    Exactly once: the UPDATE matches only an unreleased row, and only the caller whose UPDATE
    did writes the records (one per allocation and person besides).
    """
    now = timezone.now()
    if not Allocation.objects.filter(session_id=session_id, released_at__isnull=True).update(released_at=now):
        return False
    allocation = Allocation.objects.select_related(*_USAGE_RELATIONS).get(session_id=session_id)
    UsageRecord.objects.bulk_create(_usage_records(allocation, now))
    session_event("usage.recorded", session_id)
    return True


def allocations_release(session_ids: list[str]) -> set[str]:
    """``allocation_release`` for many sessions, in the caller's transaction (PostgreSQL): the
    unreleased allocations are locked and read, released in one UPDATE, their usage records
    written in one INSERT. Exactly once as well: a row another transaction released first is
    not read, one it is releasing is waited for and then not read. Returns the sessions released."""
    now = timezone.now()
    allocations = list(
        Allocation.objects.select_for_update(of=("self",))
        .filter(session_id__one_of=session_ids, released_at__isnull=True)
        .select_related(*_USAGE_RELATIONS)
        .order_by("pk")
    )
    if not allocations:
        return set()
    Allocation.objects.filter(pk__one_of=[a.pk for a in allocations]).update(released_at=now)
    UsageRecord.objects.bulk_create(record for a in allocations for record in _usage_records(a, now))
    session_events_record("usage.recorded", [a.session_id for a in allocations])
    return {str(a.session_id) for a in allocations}


# What ``_usage_records`` reads of an allocation: its session (and, for a lab pre-started for a
# class, the reservation's holder) and its course's institution.
_USAGE_RELATIONS = ("session__reservation_slot__reservation", "course")


def _usage_records(allocation: Allocation, now) -> list[UsageRecord]:
    """The usage records of an allocation held until ``now``: the session's student's, from the
    admission. A lab pre-started for a class and claimed after its admission was held for the
    course until the claim: the reservation's holder has that part, the student the rest."""
    session = allocation.session
    parts = [(session.student_id, allocation.created_at, now)]
    if session.claimed_at is not None and session.claimed_at > allocation.created_at:
        claim = min(session.claimed_at, now)
        holder = session.reservation_slot.reservation.holder_id
        parts = [(holder, allocation.created_at, claim), (session.student_id, claim, now)]
    records = []
    for student_id, start, end in parts:
        seconds = max(0, round((end - start).total_seconds()))
        records.append(
            UsageRecord(
                allocation=allocation,
                session_id=allocation.session_id,
                student_id=student_id,
                course_id=allocation.course_id,
                institution_id=allocation.course.institution_id,
                template_id=session.template_id,
                started_at=start,
                ended_at=end,
                core_percent=allocation.core_percent,
                memory_mib=allocation.memory_mib,
                core_percent_seconds=allocation.core_percent * seconds,
                memory_mib_seconds=allocation.memory_mib * seconds,
                borrowed=allocation.borrowed,
            )
        )
    return records


def session_launch(*, student, course: Course, template: LabTemplate) -> LabSession:
    """Queue a new session for ``student`` in ``course`` running ``template``.

    Raises ``LaunchRefused`` (nothing created) when the student is not enrolled, the template
    is not offered in the course, the course has no quota, or the student already has as many
    open sessions as the course allows. Capacity and the course guarantee are decided later,
    by the allocation pass, which the commit triggers. During a class the course reserved (from
    the pre-start lead to its end), the student is handed one of the labs pre-started for it
    instead, already running when it is ready (``_prestarted_claim``).
    """
    with transaction.atomic():
        _generic_plans()
        enrollment = _enrollment_locked(student=student, course_id=course.pk)
        if enrollment is None:
            raise LaunchRefused(_("You are not enrolled in %(course)s.") % {"course": course.code})
        return _launch(student=student, enrollment=enrollment, template=template)


def session_launch_of(*, student, course_id: int, template_id: int) -> LabSession:
    """``session_launch`` from the ids a page's form sends: the course is read with the student's
    enrolment (locked, in the launch's transaction) and the template among those of the course's
    institution, not before by the view; ``LaunchRefused`` when either is not there (the same
    words for both: another tenant's template names must not be found by guessing ids).

    In the caller's transaction when it holds one (the launch view holds one for its whole
    request), without a savepoint of its own: a refusal rolls the caller's back, and the caller
    must not use the database after one."""
    with transaction.atomic(savepoint=False):
        _generic_plans()
        enrollment, template = enrollment_and_template_locked(student=student, course_id=course_id, template_id=template_id)
        if enrollment is None or template is None:
            raise LaunchRefused(_("That course or template does not exist, or you are not enrolled in it."))
        return _launch(student=student, enrollment=enrollment, template=template)


def _generic_plans() -> None:
    """For the rest of the launch's transaction, PostgreSQL plans each of its prepared statements
    once per connection (``plan_cache_mode``), as it ends up doing anyway.

    The connections prepare every statement they run again (``DATABASE_PREPARE_THRESHOLD``), and
    PostgreSQL plans a prepared statement anew for its first five runs before it settles on one
    plan for its parameters (the generic plan, which for the launch's statements it always keeps).
    The launch's statements cost more to plan than to run (the student's usage: ~2 ms to plan, 0.01
    to run), so a connection's first launches were mostly planning: at a class start of 128,
    where each web connection serves a handful of launches, half of PostgreSQL's CPU. Only the
    launch's own statements: elsewhere a statement whose best plan depends on its parameters (a
    state that is rare or common) keeps PostgreSQL's choice."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")


def _enrollment_locked(*, student, course_id: int) -> Enrollment | None:
    """The student's enrolment in the course, locked until the transaction ends, with its course
    and quota read in the same statement. The lock serialises two launches by the same student,
    so both cannot pass the concurrent-session check at once."""
    return one(
        Enrollment.objects.select_for_update(of=("self",))
        .select_related("course__quota")
        .filter(user=student, course_id=course_id)
    )


def _launch(*, student, enrollment: Enrollment, template: LabTemplate) -> LabSession:
    """The rest of a launch, in its transaction, once the enrolment is locked."""
    course = enrollment.course
    if course.archived_at is not None:
        raise LaunchRefused(_("%(course)s has ended and is archived: no new sessions.") % {"course": course.code})
    # Whether the course offers the template, the student's open sessions in it, whether a
    # pre-started lab waits and the week's grants to the student: one statement, read under the
    # enrolment's lock.
    now = timezone.now()
    facts = launch_facts(student_id=student.pk, course_id=course.pk, template_id=template.pk, week=week_start(now).date())
    if not facts.offered:
        raise LaunchRefused(_("%(template)s is not offered in %(course)s.") % {"template": template.name, "course": course.code})
    quota = getattr(course, "quota", None)
    if quota is None:
        raise LaunchRefused(_("%(course)s has no NPU quota yet; ask your instructor.") % {"course": course.code})
    open_count = facts.open_sessions
    if open_count >= quota.sessions_per_student:
        raise LaunchRefused(
            _("You already have %(open)d of %(limit)d sessions open in %(course)s; stop one first.")
            % {"open": open_count, "limit": quota.sessions_per_student, "course": course.code}
        )
    budget, recent = launch_usage(
        course_id=course.pk,
        student_id=student.pk,
        quota=quota,
        half_life_hours=settings.LAB_FAIR_SHARE_HALF_LIFE_HOURS,
        now=now,
        granted=facts.granted,
    )
    if budget is not None and budget.fraction >= 1:
        raise LaunchRefused(
            _("Your weekly NPU budget in %(course)s is used up; it starts again on Monday, or ask your instructor for more.")
            % {"course": course.code}
        )
    if facts.prestarted:
        claimed = _prestarted_claim(student=student, course=course, template=template)
        if claimed is not None:
            return claimed
    delay = queue_delay_seconds(
        recent,
        seconds_per_percent_hour=settings.LAB_FAIR_SHARE_SECONDS_PER_PERCENT_HOUR,
        max_seconds=settings.LAB_FAIR_SHARE_MAX_DELAY_SECONDS,
    )
    session = LabSession(
        student=student,
        course=course,
        template=template,
        state=SessionState.QUEUED,
        queue_at=now + timedelta(seconds=delay),
        secret=secrets.token_urlsafe(32),
        **reason_fields(Reason.of("session.queued")),
    )
    row_insert(session)  # objects.create's row from a statement composed once: every launch makes one
    # A new session holds nothing yet: its page payload need not ask for an allocation.
    LabSession.allocation.related.set_cached_value(session, None)
    session_event("session.queued", session.pk)
    # No page update from here: the launching page has the session from the response, and
    # the controller run this wakes publishes it with the rest of the batch a moment later.
    controller_wake()
    return session


def _prestarted_claim(*, student, course: Course, template: LabTemplate) -> LabSession | None:
    """Hand ``student`` a session pre-started for a class reservation of ``course`` running
    ``template`` whose slot is on now (from the pre-start lead to its end), the readiest first
    (running, starting, admitted, queued); ``None`` when there is none. In the caller's transaction.

    ``SKIP LOCKED`` on the session row: two students launching at once lock different sessions,
    never the same one, and neither waits for the other. The session keeps its secret: it was
    made for it and shown to nobody, its owner until now (the reservation's holder) cannot sign
    in. Its lifetime and idle clock start again at the hand-over, and so does the student's usage:
    what it held before the claim is the course's (``_usage_records``, ``labs.selectors.usage``).
    """
    from django.db.models import Case, IntegerField, Value, When

    # Called only when ``launch_facts`` saw one waiting: most launches come with no class
    # reserved, and that check spares them composing the locking query below.
    unclaimed = LabSession.objects.filter(
        course=course,
        template=template,
        reservation_slot__isnull=False,
        claimed_at__isnull=True,
        state__in=CLAIMABLE,
    )
    now = timezone.now()
    lead = timedelta(seconds=settings.LAB_RESERVATION_PRESTART_SECONDS)
    readiness = Case(
        When(state=SessionState.RUNNING, then=Value(0)),
        When(state=SessionState.STARTING, then=Value(1)),
        When(state=SessionState.ADMITTED, then=Value(2)),
        default=Value(3),
        output_field=IntegerField(),
    )
    found = (
        unclaimed.select_for_update(of=("self",), skip_locked=True)
        .filter(
            reservation_slot__starts_at__lte=now + lead,
            reservation_slot__ends_at__gt=now,
            reservation_slot__reservation__cancelled_at__isnull=True,
        )
        .order_by(readiness, "created_at")
        .values_list("pk", "state")
        .first()
    )
    if found is None:
        return None
    pk, state = found
    fields: dict[str, object] = {"student": student, "claimed_at": now, "last_active_at": now}
    if state == SessionState.RUNNING:
        fields["running_at"] = now
    LabSession.objects.filter(pk=pk).update(**fields, version=F("version") + 1)
    session_changes_publish([pk])
    # Read in the claim's transaction with all its launching page shows: nothing is read after the commit.
    return LabSession.objects.select_related("course__quota", "template", "student", "allocation__card__node").get(pk=pk)


class ExtendRefused(ValidationError):
    """The session cannot be extended; the message says why, in the reader's language."""


def session_extend(*, session_id, student) -> int:
    """Lengthen ``student``'s running session once by its course's ``extension_minutes``.

    Returns the extensions still left. The controller reads the new deadline at its next run.
    """
    with transaction.atomic():
        session = one(
            LabSession.objects.select_for_update(of=("self",))
            .select_related("course__quota")
            .filter(pk=session_id, student=student)
        )
        if session is None or session.state != SessionState.RUNNING:
            raise ExtendRefused(_("Only a running session can be extended."))
        quota = getattr(session.course, "quota", None)
        allowed = quota.extensions_allowed if quota else 0
        if not allowed:
            raise ExtendRefused(_("This course allows no extensions."))
        if session.extensions_used >= allowed:
            raise ExtendRefused(
                ngettext(
                    "This session has had the %(n)s extension the course allows.",
                    "This session has had all %(n)s extensions the course allows.",
                    allowed,
                )
                % {"n": allowed}
            )
        if session.reclaim_at is not None:
            raise ExtendRefused(_("Another course needs this session's capacity back; it cannot be extended."))
        if session.budget_stop_at is not None:
            raise ExtendRefused(_("Your weekly NPU budget is used up; this session cannot be extended."))
        LabSession.objects.filter(pk=session.pk).update(extensions_used=F("extensions_used") + 1, version=F("version") + 1)
        session_changes_publish([session.pk])
    return allowed - session.extensions_used - 1


def session_stop(*, session_id, reason: Reason) -> bool:
    """Stop a session on request (student, instructor, expiry). Returns ``False`` if already ending.

    A queued or admitted session owns nothing in the cluster and ends at once; a starting or
    running one goes to ``stopping`` and a worker deletes its instance.
    """
    with transaction.atomic():
        return _stop_in(session_id, reason=reason)


def session_stop_joined(*, session_id, reason: Reason) -> bool:
    """``session_stop`` in the caller's transaction when it holds one (the student's stop view
    holds one for its whole request), without a savepoint of its own: a failure rolls the
    caller's back, and the caller must not use the database after one."""
    with transaction.atomic(savepoint=False):
        return _stop_in(session_id, reason=reason)


def _stop_in(session_id, *, reason: Reason) -> bool:
    if _session_transition_in(
        session_id, to=SessionState.STOPPED, reason=reason, only_from={SessionState.QUEUED, SessionState.ADMITTED}
    ):
        # An admitted session freed its reservation: queued ones may now fit.
        controller_wake()
        return True
    return _begin_stop_in(session_id, reason=reason, failed=False)


def session_begin_stop(session_id, *, reason: Reason, failed: bool) -> bool:
    """Move a starting or running session to ``stopping``; the controller then deletes its instance."""
    with transaction.atomic():
        return _begin_stop_in(session_id, reason=reason, failed=failed)


def _begin_stop_in(session_id, *, reason: Reason, failed: bool) -> bool:
    end_state = SessionState.FAILED if failed else SessionState.STOPPED
    moved = _session_transition_in(
        session_id,
        to=SessionState.STOPPING,
        reason=reason,
        only_from={SessionState.STARTING, SessionState.RUNNING},
        end_state=end_state.value,
    )
    if moved:
        controller_wake()
    return moved
