"""Class reservations: book, cancel, and the pre-start rule (``reservations_enforce``).

An instructor books ``count`` sessions of a template for the class's meeting times. The
booking is expanded into slots at once (``ReservationSlot``) and checked slot by slot against
the cluster (``labs.domain.reservations.slot_check``); a slot that does not fit refuses the whole
booking with the reason, and nothing is written.

During a slot, from ``LAB_RESERVATION_PRESTART_SECONDS`` before it begins to its end, the
course's guarantee is raised to at least the reservation's count times the template's charge
(``reserved_demand``, applied by ``labs.services.allocation.course_rules``): the engine admits
the class inside its guarantee, and the reclaim rule takes back what other courses borrowed.

The pre-start rule, one more rule of the controller's beat, queues the slot's sessions a lead
time ahead under the reservation's ``holder`` (an inactive account: every session keeps an
owner, every allocation is released once and its usage recorded as for any session). A student
of the course who launches the template during the slot is handed one of them
(``labs.services.sessions.session_launch``); those nobody claimed are stopped
``LAB_RESERVATION_GRACE_SECONDS`` after the slot began (or at its end, if sooner).

In-process entry points (a benchmark can drive them with its own clock): ``reservation_book``,
``reservation_cancel`` and ``reservations_enforce(now=...)``.
"""

from __future__ import annotations

import secrets
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext

from labs.dispatch import controller_wake
from labs.domain.quota import Resources
from labs.domain.reasons import Reason
from labs.domain.reservations import Booked, Demand, SlotCheck, slot_check
from labs.domain.states import SessionState
from labs.domain.units import Scenario
from labs.models import Course, CourseQuota, Enrollment, LabSession, LabTemplate, Node, Reservation, ReservationSlot
from labs.selectors.capacity import capacity_snapshot, placement_config
from labs.services.audit import audit_record
from labs.services.events import events_batch
from labs.services.locks import reservation_lock
from labs.services.sessions import reason_fields, session_stop

# What a pre-started session may be in while it waits for a student (stoppable, not ending).
WAITING = (SessionState.QUEUED, SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING)


class ReservationRefused(ValidationError):
    """A booking or cancel that was not accepted; nothing was written. The message says why."""


def _lead() -> timedelta:
    return timedelta(seconds=settings.LAB_RESERVATION_PRESTART_SECONDS)


def _grace() -> timedelta:
    return timedelta(seconds=settings.LAB_RESERVATION_GRACE_SECONDS)


def slot_label(starts_at: datetime, ends_at: datetime) -> str:
    """ "Tue 3 Mar 14:00–15:30" in the portal's time zone and the active language."""
    start = timezone.localtime(starts_at)
    return f"{date_format(start, 'D j M H:i')}–{date_format(timezone.localtime(ends_at), 'H:i')}"


def reserved_demand(course_ids: Iterable[int] | None = None, *, now: datetime | None = None) -> dict[int, Resources]:
    """What each course's reservations hold now: the sum, over its slots whose raised window
    (``LAB_RESERVATION_PRESTART_SECONDS`` before the start, to the end) contains ``now``, of the
    reservation's count times the template's charge. Courses with none are absent."""
    now = now or timezone.now()
    slots = ReservationSlot.objects.filter(reservation__cancelled_at__isnull=True, starts_at__lte=now + _lead(), ends_at__gt=now)
    if course_ids is not None:
        slots = slots.filter(reservation__course_id__in=list(course_ids))
    held: dict[int, Resources] = {}
    for course_id, count, core, memory in slots.values_list(
        "reservation__course_id", "reservation__count", "reservation__template__core_percent", "reservation__template__memory_mib"
    ):
        held[course_id] = held.get(course_id, Resources()) + Demand(core, memory, count).charge
    return held


def _holder(course: Course):
    """A fresh inactive account to own a reservation's pre-started sessions (it cannot sign in)."""
    # Its name says what it is on the pages that list users (live sessions, usage).
    user = get_user_model()(
        username=f"reserved-{course.pk}-{uuid.uuid4().hex[:12]}", first_name=f"[{course.code} class reservation]", is_active=False
    )
    user.set_unusable_password()
    user.save()
    return user


def _demand(template: LabTemplate, count: int) -> Demand:
    return Demand(
        template.core_percent,
        template.memory_mib,
        count,
        Scenario(template.scenario),
        template.cpu_request_millicores,
        template.host_memory_request_mib,
    )


def _overlaps(
    slots: Sequence[tuple[datetime, datetime]], *, besides: int | None = None
) -> list[tuple[datetime, datetime, Booked]]:
    """Booked slots whose raised window meets any of ``slots``'s: (start, end, booking), the
    booking's key being (start, end, template name) to name it in a refusal; those of
    reservation ``besides`` left out."""
    lead = _lead()
    first = min(s for s, _ in slots) - lead
    last = max(e for _, e in slots) + lead
    rows = (
        ReservationSlot.objects.filter(reservation__cancelled_at__isnull=True, starts_at__lt=last, ends_at__gt=first)
        .exclude(reservation_id=besides)
        .values_list(
            "starts_at",
            "ends_at",
            "reservation__course_id",
            "reservation__count",
            "reservation__template__core_percent",
            "reservation__template__memory_mib",
            "reservation__template__scenario",
            "reservation__template__cpu_request_millicores",
            "reservation__template__host_memory_request_mib",
            "reservation__template__name",
        )
    )
    return [
        (s, e, Booked(c, Demand(core, mem, n, Scenario(sc), cpu, host_mib), (s, e, name)))
        for s, e, c, n, core, mem, sc, cpu, host_mib, name in rows
    ]


def _guarantees(*, besides: int | None = None) -> dict[int, Resources]:
    """The guarantees of the courses not archived (course id -> totals), ``besides``'s left out."""
    return {
        course_id: Resources(core, memory, instances)
        for course_id, core, memory, instances in CourseQuota.objects.filter(course__archived_at__isnull=True)
        .exclude(course_id=besides)
        .values_list("course_id", "core_percent", "memory_mib", "instance_count")
    }


# A refusal names this many of the bookings and guarantees in the way, the largest first.
NAMED_IN_REFUSAL = 5


def _amount_text(amount: Resources) -> str:
    return _("%(core)s %% / %(memory)s GiB") % {"core": amount.core_percent, "memory": f"{amount.memory_mib / 1024:g}"}


def _in_the_way(check: SlotCheck, *, institution_id: int) -> str:
    """What holds the cluster at a slot, in words, the largest ``NAMED_IN_REFUSAL`` first: each
    booking (course, time, sessions) and each course guarantee of ``institution_id``, with how
    much it holds. Other institutions' courses share the cluster but are not named to this one:
    what they hold is one sum."""
    codes = dict(
        Course.objects.filter(pk__in={h.course_id for h in check.held}, institution_id=institution_id).values_list("pk", "code")
    )
    items: list[tuple[Resources, str]] = []
    elsewhere = Resources()
    for held in check.held:
        words = {"course": codes.get(held.course_id), "amount": _amount_text(held.amount)}
        if words["course"] is None:
            elsewhere = elsewhere + held.amount
        elif held.booking is None:
            items.append((held.amount, _("%(course)s's guarantee holds %(amount)s") % words))
        else:
            start, end, template = held.booking.key
            words.update(when=slot_label(start, end), count=held.booking.demand.count, template=template)
            items.append((held.amount, _("%(course)s's booking %(when)s holds %(count)s × %(template)s, %(amount)s") % words))
    if elsewhere != Resources():
        items.append((elsewhere, _("other institutions' courses hold %(amount)s") % {"amount": _amount_text(elsewhere)}))
    items.sort(key=lambda item: (-item[0].core_percent, -item[0].memory_mib))
    named = [text for _amount, text in items[:NAMED_IN_REFUSAL]]
    if more := len(items) - len(named):
        named.append(ngettext("%(n)s more", "%(n)s more", more) % {"n": more})
    return pgettext("between the items of a list", "; ").join(named)


def _check(course: Course, template: LabTemplate, count: int, slots: Sequence[tuple[datetime, datetime]], now: datetime) -> None:
    """Refuse (``ReservationRefused``) a booking that cannot be held; see ``reservation_book``."""
    if course.archived:
        raise ReservationRefused(_("%(course)s is archived: nothing can be booked.") % {"course": course.code})
    if not course.templates.filter(pk=template.pk).exists():
        raise ReservationRefused(
            _("%(template)s is not offered in %(course)s.") % {"template": template.name, "course": course.code}
        )
    if not CourseQuota.objects.filter(course=course).exists():
        raise ReservationRefused(_("%(course)s has no NPU quota yet.") % {"course": course.code})
    if template.card_count > 1:
        # The booking's room and demand are counted in shares of one card (``slot_room``).
        raise ReservationRefused(
            _("%(template)s runs on %(cards)s whole cards; a class reservation holds labs on a share of one card.")
            % {"template": template.name, "cards": template.card_count}
        )
    if count < 1:
        raise ReservationRefused(_("Book at least one session."))
    if not slots:
        raise ReservationRefused(_("Choose at least one date, or weekdays between a first and a last date."))
    roster = Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).count()
    if count > roster:
        raise ReservationRefused(
            _("%(count)s sessions is more than the %(roster)s students enrolled in %(course)s.")
            % {"count": count, "roster": roster, "course": course.code}
        )
    for start, end in slots:
        if end <= start:
            raise ReservationRefused(_("A class must end after it starts."))
        if start <= now:
            raise ReservationRefused(
                _("%(when)s is in the past: only a class still to come can be booked.") % {"when": slot_label(start, end)}
            )
    booked = _overlaps(slots)
    lead = _lead()
    guarantees = _guarantees(besides=course.pk)
    nodes = capacity_snapshot()
    config = placement_config()
    want = _demand(template, count)
    for start, end in sorted(slots):
        during = [b for s, e, b in booked if s - lead < end and e > start - lead]
        own = sum(b.demand.count for b in during if b.course_id == course.pk)
        if own + count > roster:
            raise ReservationRefused(
                _(
                    "%(when)s: %(course)s already has %(booked)s sessions booked then; %(count)s more would be "
                    "more than its %(roster)s students."
                )
                % {"when": slot_label(start, end), "course": course.code, "booked": own, "count": count, "roster": roster}
            )
        check = slot_check(nodes, want, bookings=during, guarantees=guarantees, config=config)
        if check.room < count:
            refusal = _(
                "%(when)s: needs %(count)s instances of %(core)s %% / %(memory)s GiB; the cluster can hold "
                "%(room)s beside the other bookings and guarantees."
            ) % {
                "when": slot_label(start, end),
                "count": count,
                "core": template.core_percent,
                "memory": f"{template.memory_mib / 1024:g}",
                "room": check.room,
            }
            if check.held:
                refusal = _("%(refusal)s In the way then: %(held)s.") % {
                    "refusal": refusal,
                    "held": _in_the_way(check, institution_id=course.institution_id),
                }
            if check.alone < count:
                refusal = _("%(refusal)s With nothing else booked or guaranteed it holds %(alone)s.") % {
                    "refusal": refusal,
                    "alone": check.alone,
                }
            raise ReservationRefused(refusal)


def reservation_book(
    *,
    course: Course,
    template: LabTemplate,
    count: int,
    slots: Sequence[tuple[datetime, datetime]],
    by=None,
    rule: dict | None = None,
    now: datetime | None = None,
) -> Reservation:
    """Book ``count`` sessions of ``template`` for ``course`` at each of ``slots`` (aware start, end).

    ``rule`` is what the instructor chose, kept for people (``start_time``, ``minutes``,
    ``weekdays``, ``first_date``, ``last_date``, ``dates``); without it the first slot's time of
    day and length are stored. Refused with ``ReservationRefused`` (nothing written) when the
    course is archived or has no quota, the template is not offered in it or is on whole cards
    (a booking's room is counted in shares of one card), ``count`` is below 1
    or above the course's roster (alone, or with the course's other bookings at an overlapping
    time), a slot is in the past or ends before it starts, or the cluster cannot hold a slot's
    sessions beside the other bookings and the other courses' guarantees (the message names
    the first such slot, how many fit and what holds the cluster then: this institution's
    bookings and guarantees by course, other institutions' as one sum). Bookings are checked
    one at a time (an advisory lock), so two cannot each fit only in the other's absence. Audited as ``reservation.create``.
    """
    now = now or timezone.now()
    if any(timezone.is_naive(moment) for slot in slots for moment in slot):
        raise ValueError("reservation_book: slots must be aware datetimes (start, end)")
    slots = sorted(set(slots))
    with transaction.atomic():
        reservation_lock()
        _check(course, template, count, slots, now)
        first_start = timezone.localtime(slots[0][0])
        rule = rule or {
            "start_time": first_start.time().replace(tzinfo=None),
            "minutes": int((slots[0][1] - slots[0][0]).total_seconds() // 60),
            "dates": [timezone.localtime(s).date() for s, _ in slots],
        }
        reservation = Reservation.objects.create(
            course=course,
            template=template,
            count=count,
            start_time=rule["start_time"],
            minutes=rule["minutes"],
            weekdays=sorted(rule.get("weekdays") or []),
            first_date=rule.get("first_date"),
            last_date=rule.get("last_date"),
            dates=[d.isoformat() for d in rule.get("dates") or []],
            holder=_holder(course),
            created_by=by if getattr(by, "pk", None) else None,
        )
        ReservationSlot.objects.bulk_create(ReservationSlot(reservation=reservation, starts_at=s, ends_at=e) for s, e in slots)
        audit_record(
            by=by,
            action="reservation.create",
            target=f"{course.code}: {count} x {template.slug}",
            institution=course.institution,
            after={
                "template": template.slug,
                "count": count,
                "slots": len(slots),
                "first": slots[0][0].isoformat(),
                "last": slots[-1][0].isoformat(),
            },
        )
    return reservation


def reservation_cancel(*, reservation: Reservation, by=None, now: datetime | None = None) -> int:
    """Cancel ``reservation``: its slots still to come are deleted, and the pre-started sessions
    nobody claimed of a slot already under way are stopped. Returns how many slots went.

    Past slots stay (with their sessions, for the history). Refused when already cancelled.
    Audited as ``reservation.cancel``.
    """
    now = now or timezone.now()
    with events_batch(), transaction.atomic():
        locked = Reservation.objects.select_for_update().select_related("course__institution").get(pk=reservation.pk)
        if locked.cancelled_at is not None:
            raise ReservationRefused(_("This reservation was already cancelled."))
        Reservation.objects.filter(pk=locked.pk).update(cancelled_at=now)
        gone, _deleted = ReservationSlot.objects.filter(
            reservation=locked, prestarted_at__isnull=True, starts_at__gt=now
        ).delete()
        for session_id, _starts in _unclaimed(Q(reservation_slot__reservation=locked)):
            session_stop(session_id=session_id, reason=Reason.of("session.reservation_cancelled"))
        audit_record(
            by=by,
            action="reservation.cancel",
            target=f"{locked.course.code}: {locked.count} x {locked.template.slug}",
            institution=locked.course.institution,
            before={"slots_to_come": gone},
            after={"cancelled_at": now.isoformat()},
        )
    return gone


def _unclaimed(where: Q) -> list:
    """Lock and list the pre-started sessions nobody claimed that match ``where`` (in the
    caller's transaction). Locked rows are skipped: a student is being handed that one now."""
    return list(
        LabSession.objects.select_for_update(of=("self",), skip_locked=True)
        .filter(where, reservation_slot__isnull=False, claimed_at__isnull=True, state__in=WAITING)
        .values_list("pk", "reservation_slot__starts_at")
    )


@dataclass
class ReservationReport:
    prestarted: list[int] = field(default_factory=list)  # slots whose sessions were queued now
    sessions: list[str] = field(default_factory=list)  # the sessions queued
    unclaimed: list[str] = field(default_factory=list)  # stopped: nobody claimed them in time


def reservations_enforce(*, now: datetime | None = None) -> ReservationReport:
    """The reservations rule (beat, every ``LAB_RESERVATION_CHECK_SECONDS``; idempotent).

    1. Each slot due (it begins within ``LAB_RESERVATION_PRESTART_SECONDS``, its claim window
       has not closed, not pre-started yet) gets its ``count`` sessions queued under the
       reservation's holder, in one transaction with marking the slot pre-started: a second run,
       or a run after a worker died mid-rule, finds it marked (or finds nothing written) and
       queues nothing twice. The controller admits them inside the raised guarantee and starts them.
    2. Pre-started sessions nobody claimed by the slot's start plus ``LAB_RESERVATION_GRACE_SECONDS``
       (or its end, if sooner) are stopped with ``session.reservation_unclaimed``.
    """
    now = now or timezone.now()
    report = ReservationReport()
    lead, grace = _lead(), _grace()
    due = list(
        ReservationSlot.objects.filter(
            reservation__cancelled_at__isnull=True,
            prestarted_at__isnull=True,
            starts_at__lte=now + lead,
            starts_at__gt=now - grace,
            ends_at__gt=now,
        ).values_list("pk", flat=True)
    )
    with events_batch():
        for slot_id in due:
            made = reservation_slot_prestart(slot_id=slot_id, now=now)
            if made:
                report.prestarted.append(slot_id)
                report.sessions.extend(made)
        with transaction.atomic():
            closed = Q(reservation_slot__starts_at__lte=now - grace) | Q(reservation_slot__ends_at__lte=now)
            for session_id, starts_at in _unclaimed(closed):
                reason = Reason.of(
                    "session.reservation_unclaimed",
                    time=timezone.localtime(starts_at).strftime("%H:%M"),
                    minutes=settings.LAB_RESERVATION_GRACE_SECONDS // 60,
                )
                if session_stop(session_id=session_id, reason=reason):
                    report.unclaimed.append(str(session_id))
    return report


def reservation_slot_prestart(*, slot_id: int, now: datetime | None = None) -> list[str]:
    """Queue the pre-started sessions of slot ``slot_id`` unless it has them already; their ids.

    One transaction: the slot row is locked (``SKIP LOCKED``: a run that finds another at work
    on it leaves it), checked again to be neither pre-started nor cancelled (a run that listed it
    before another committed finds it done), and marked in the same transaction that queues the
    sessions. So the sessions exist exactly once, whoever runs the rule, and a worker that dies
    before the commit leaves nothing.
    """
    now = now or timezone.now()
    with transaction.atomic():
        slot = (
            ReservationSlot.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("reservation__template")
            .filter(pk=slot_id, prestarted_at__isnull=True, reservation__cancelled_at__isnull=True)
            .first()
        )
        if slot is None:
            return []
        reservation = slot.reservation
        made = LabSession.objects.bulk_create(
            LabSession(
                student_id=reservation.holder_id,
                course_id=reservation.course_id,
                template=reservation.template,
                state=SessionState.QUEUED,
                queue_at=now,
                secret=secrets.token_urlsafe(32),
                reservation_slot=slot,
                **reason_fields(Reason.of("session.queued")),
            )
            for _ in range(reservation.count)
        )
        ReservationSlot.objects.filter(pk=slot.pk).update(prestarted_at=now)
        controller_wake()
    return [str(s.pk) for s in made]


def weekly_slots(
    *,
    start: time,
    minutes: int,
    weekdays: Iterable[int] = (),
    first: date | None = None,
    last: date | None = None,
    dates=(),
    now: datetime | None = None,
) -> list[tuple[datetime, datetime]]:
    """The booking's slots in the portal's time zone (``labs.domain.reservations.slot_times``);
    a weekly booking starts at its next meeting after ``now`` (default: now), whatever its first
    date; single dates are kept as given (``reservation_book`` refuses one in the past)."""
    from labs.domain.reservations import slot_times

    return slot_times(
        start=start,
        minutes=minutes,
        zone=timezone.get_default_timezone(),
        dates=dates,
        weekdays=weekdays,
        first=first,
        last=last,
        after=now or timezone.now(),
    )


@dataclass
class ReservationMoves:
    moved: list[str] = field(default_factory=list)  # pre-started sessions stopped on the node and queued again
    left: list[str] = field(default_factory=list)  # pre-started sessions no other node holds: they stay till the deadline
    slots_short: list[int] = field(default_factory=list)  # slots that no longer all fit: their instructors are told


def reservations_move_off(*, node: Node, now: datetime | None = None) -> ReservationMoves:
    """Move the class reservations off ``node``, which the caller has just drained to empty it for
    maintenance (``labs.services.evacuation.node_evacuate``, in its transaction).

    A lab pre-started for a class on the node that nobody claimed yet is stopped and queued again
    for its slot, to be placed on another node (no student is on it to warn), as far as the other
    nodes hold them now; the rest stay till the deadline. Each booked slot still to come is checked
    again against the cluster without the node, as at booking. A slot with sessions that fit
    nowhere else is marked (``evacuation_shortfall``, ``evacuated_node``): the instructor's
    reservations page says so. Undraining the node clears the marks (``reservations_node_back``).
    """
    from labs.domain.reservations import room_now

    now = now or timezone.now()
    report = ReservationMoves()
    reservation_lock()
    nodes = capacity_snapshot()
    config = placement_config()
    short: dict[int, int] = defaultdict(int)
    on_node: dict[int, list] = defaultdict(list)
    for session_id, slot_id in (
        LabSession.objects.select_for_update(of=("self",), skip_locked=True)
        .filter(
            reservation_slot__isnull=False,
            claimed_at__isnull=True,
            state__in=WAITING,
            allocation__card__node=node,
            allocation__released_at__isnull=True,
        )
        .order_by("created_at", "pk")
        .values_list("pk", "reservation_slot_id")
    ):
        on_node[slot_id].append(session_id)
    slots = {s.pk: s for s in ReservationSlot.objects.select_related("reservation__template").filter(pk__in=on_node)}
    order = sorted(on_node)
    rooms = room_now(nodes, [_demand(slots[pk].reservation.template, len(on_node[pk])) for pk in order], config=config)
    for slot_id, room in zip(order, rooms, strict=True):
        sessions = on_node[slot_id]
        for session_id in sessions[:room]:
            session_stop(session_id=session_id, reason=Reason.of("session.evacuation_moved"))
        slot = slots[slot_id]
        again = LabSession.objects.bulk_create(
            LabSession(
                student_id=slot.reservation.holder_id,
                course_id=slot.reservation.course_id,
                template=slot.reservation.template,
                state=SessionState.QUEUED,
                queue_at=now,
                secret=secrets.token_urlsafe(32),
                reservation_slot=slot,
                **reason_fields(Reason.of("session.queued")),
            )
            for _ in sessions[:room]
        )
        report.moved.extend(str(s.pk) for s in again)
        report.left.extend(str(pk) for pk in sessions[room:])
        if room < len(sessions):
            short[slot_id] += len(sessions) - room
    short.update(_slots_short(nodes, config, now))
    for slot_id, missing in short.items():
        ReservationSlot.objects.filter(pk=slot_id).update(evacuation_shortfall=missing, evacuated_node=node.name)
    report.slots_short = sorted(short)
    if report.moved:
        controller_wake()
    return report


def _slots_short(nodes, config, now: datetime) -> dict[int, int]:
    """Each booked slot still to come that ``nodes`` no longer holds whole: how many are missing."""
    lead = _lead()
    guarantees = _guarantees()
    missing: dict[int, int] = {}
    to_come = ReservationSlot.objects.filter(
        reservation__cancelled_at__isnull=True, prestarted_at__isnull=True, ends_at__gt=now
    ).select_related("reservation__template")
    for slot in to_come:
        reservation = slot.reservation
        start, end = slot.starts_at, slot.ends_at
        during = [b for s, e, b in _overlaps([(start, end)], besides=reservation.pk) if s - lead < end and e > start - lead]
        others = {c: g for c, g in guarantees.items() if c != reservation.course_id}
        room = slot_check(
            nodes, _demand(reservation.template, reservation.count), bookings=during, guarantees=others, config=config
        ).room
        if room < reservation.count:
            missing[slot.pk] = reservation.count - room
    return missing


def reservations_node_back(*, node: Node) -> int:
    """``node`` takes sessions again: the marks its emptying left on slots go; how many slots."""
    return ReservationSlot.objects.filter(evacuated_node=node.name).update(evacuation_shortfall=0, evacuated_node="")
