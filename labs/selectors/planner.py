"""Reads for the term capacity planner (``labs.domain.planner``): the cluster, the class bookings,
the guarantees and the usage ledger, handed to the domain, and its figures shaped for a reader.

The plan is made from the whole cluster (a class fits or not beside everyone's), but a reader
sees only what their scope names: ``PlannerScope.institutions`` (``None``: every institution,
for a platform operator). Bookings and courses of other institutions are never named, only
counted in the hour's totals; ``PlannerScope.courses`` are the reader's own courses, whose share
of each hour is shown apart ("yours").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta

from django.utils import timezone
from django.utils.translation import gettext, pgettext

from labs.domain.planner import (
    DEFAULT_HISTORY_WEEKS,
    HOURS_PER_WEEK,
    Booking,
    ClassHour,
    HourFigures,
    PastSpan,
    Verdict,
    lab_shape,
    plan_hours,
    usual_use,
    what_if,
)
from labs.domain.quota import Resources
from labs.domain.reservations import slot_times
from labs.domain.units import Scenario
from labs.exports import csv_document
from labs.models import Course, CourseQuota, LabTemplate, Reservation, ReservationSlot
from labs.selectors.capacity import capacity_snapshot, placement_config, quota_rule
from labs.selectors.usage import usage_spans


@dataclass(frozen=True)
class PlannerScope:
    """Whose bookings a reader may see named (``institutions``; ``None``: all) and which courses
    are the reader's own (``courses``: shown apart in each hour)."""

    institutions: frozenset[int] | None
    courses: frozenset[int] = frozenset()

    def names(self, institution_id: int) -> bool:
        return self.institutions is None or institution_id in self.institutions


@dataclass(frozen=True)
class BookingInfo:
    """A booked slot as a reader may see it: named (course code, template, count) when the
    reader's scope covers its institution, otherwise only that another institution holds it."""

    slot_id: int
    course_id: int
    named: bool
    course: str = ""
    template: str = ""
    count: int = 0

    def text(self) -> str:
        if not self.named:
            return gettext("another institution's class")
        return gettext("%(course)s: %(count)s × %(template)s") % {
            "course": self.course,
            "count": self.count,
            "template": self.template,
        }


@dataclass
class PlanReport:
    """A plan as read: the hours with their figures, the booked slots by id, the reader's scope."""

    first: date
    weeks: int
    history_weeks: int
    hours: list[HourFigures]
    bookings: dict[int, BookingInfo]
    scope: PlannerScope
    chip_types: list[str] = field(default_factory=list)

    def mine(self, hour: HourFigures) -> Resources:
        return hour.held_by(self.scope.courses)

    def named(self, hour: HourFigures) -> list[str]:
        return [self.bookings[key].text() for key in hour.bookings]

    @property
    def hours_short(self) -> int:
        """Hours in which something finds no card or a guarantee is not covered."""
        return sum(1 for h in self.hours if not h.fits)

    @property
    def busiest(self) -> HourFigures | None:
        """The hour with the highest load (the first of equals)."""
        return max(self.hours, key=lambda h: h.load_percent, default=None)


def monday_of(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _week_start(day: date) -> datetime:
    return datetime.combine(monday_of(day), time(0), tzinfo=timezone.get_default_timezone())


def _hours(first: date, weeks: int) -> list[datetime]:
    """Every hour of ``weeks`` weeks from the Monday of ``first``, wall-clock hours in the portal's zone."""
    zone = timezone.get_default_timezone()
    monday = monday_of(first)
    return [datetime.combine(monday + timedelta(days=h // 24), time(h % 24), tzinfo=zone) for h in range(weeks * HOURS_PER_WEEK)]


def _shapes(template_ids: Iterable[int]) -> dict[int, tuple]:
    rows = LabTemplate.objects.filter(pk__in=set(template_ids)).values_list(
        "pk", "core_percent", "memory_mib", "scenario", "cpu_request_millicores", "host_memory_request_mib", "card_count"
    )
    return {pk: (core, mib, Scenario(sc), cpu, host, cards) for pk, core, mib, sc, cpu, host, cards in rows}


def _usual(*, history_weeks: int, now: datetime) -> dict:
    """The usual self-paced use per hour of the week, from the ledger's last ``history_weeks`` whole
    weeks before ``now``'s. Sessions held for a class reservation (by its holder) are the
    bookings' and left out; whole-card templates are left out (the planner places shares of a card)."""
    this_week = _week_start(timezone.localdate(now))
    weeks = [this_week - timedelta(weeks=w) for w in range(history_weeks, 0, -1)]
    holders = set(Reservation.objects.values_list("holder_id", flat=True))
    spans = [s for s in usage_spans(since=weeks[0], until=this_week, now=now) if s.student_id not in holders]
    shapes = _shapes(s.template_id for s in spans)
    past = []
    for s in spans:
        _core, _mib, scenario, cpu, host, cards = shapes[s.template_id]
        if cards > 1 or s.memory_mib < 1:
            continue
        past.append(PastSpan(s.course_id, s.start, s.end, lab_shape(s.core_percent, s.memory_mib, scenario, cpu, host)))
    return usual_use(past, weeks=weeks)


def _bookings(*, since: datetime, until: datetime, scope: PlannerScope) -> tuple[list[Booking], dict[int, BookingInfo]]:
    """The booked slots overlapping ``[since, until)``, the earlier booked first (``Booking.key``:
    the slot id), and how the reader may see each."""
    rows = (
        ReservationSlot.objects.filter(reservation__cancelled_at__isnull=True, starts_at__lt=until, ends_at__gt=since)
        .order_by("reservation__created_at", "reservation_id", "starts_at")
        .values_list(
            "pk",
            "starts_at",
            "ends_at",
            "reservation__course_id",
            "reservation__course__institution_id",
            "reservation__course__code",
            "reservation__count",
            "reservation__template__name",
            "reservation__template_id",
        )
    )
    rows = list(rows)
    shapes = _shapes(r[-1] for r in rows)
    bookings: list[Booking] = []
    info: dict[int, BookingInfo] = {}
    for pk, starts, ends, course_id, institution_id, code, count, name, template_id in rows:
        core, mib, scenario, cpu, host, _cards = shapes[template_id]
        bookings.append(Booking(course_id, starts, ends, lab_shape(core, mib, scenario, cpu, host), count, pk))
        named = scope.names(institution_id)
        info[pk] = BookingInfo(pk, course_id, named, code if named else "", name if named else "", count if named else 0)
    return bookings, info


def _quotas() -> dict:
    """The quota rules of the courses not archived, by course id."""
    quotas = CourseQuota.objects.filter(course__archived_at__isnull=True).order_by("course_id")
    return {q.course_id: quota_rule(q, None) for q in quotas}


def term_plan(
    *, scope: PlannerScope, first: date, weeks: int, history_weeks: int = DEFAULT_HISTORY_WEEKS, now: datetime | None = None
) -> PlanReport:
    """Every hour of ``weeks`` weeks from the Monday of ``first``: what the bookings, the usual use
    (learnt from the last ``history_weeks`` weeks of the ledger before ``now``) and the guarantees
    take of the cluster. See the module docstring for what the reader sees."""
    now = now or timezone.now()
    hours = _hours(first, weeks)
    bookings, info = _bookings(since=hours[0], until=hours[-1] + timedelta(hours=1), scope=scope)
    nodes = capacity_snapshot()
    guarantees = {course_id: rule.guarantee for course_id, rule in _quotas().items()}
    plan = plan_hours(
        nodes,
        hours,
        bookings=bookings,
        usual=_usual(history_weeks=history_weeks, now=now),
        guarantees=guarantees,
        config=placement_config(),
    )
    chip_types = sorted({t.chip_type for t in plan.hours[0].card_types}) if plan.hours else []
    return PlanReport(monday_of(first), weeks, history_weeks, list(plan.hours), info, scope, chip_types)


# --- what if --------------------------------------------------------------------------------------


@dataclass
class WhatIfReport:
    verdict: Verdict
    hours: list[ClassHour]
    bookings: dict[int, BookingInfo]
    slots: int

    def collisions(self) -> list[tuple[ClassHour, str]]:
        """Each hour of the class shared with other bookings, and those bookings in words (one list)."""
        between = pgettext("between the items of a list", "; ")
        return [(h, between.join(self.bookings[k].text() for k in h.collisions)) for h in self.hours if h.collisions]


class WhatIfRefused(ValueError):
    """A what-if that cannot be answered (no slot in the weeks, the course has no quota, a
    whole-card template); the message says why, in the reader's language."""


def class_what_if(
    *,
    scope: PlannerScope,
    course: Course,
    template: LabTemplate,
    count: int,
    weekday: int,
    start: time,
    end: time,
    first: date,
    last: date,
    history_weeks: int = DEFAULT_HISTORY_WEEKS,
    now: datetime | None = None,
) -> WhatIfReport:
    """Whether a new class of ``count`` of ``template`` in ``course``, on ``weekday`` (0 = Monday)
    from ``start`` to ``end`` every week from ``first`` to ``last``, would fit
    (``labs.domain.planner.what_if``). Nothing is booked. ``WhatIfRefused`` says why it cannot be
    answered; the caller has checked that the reader may plan for ``course`` and that ``template``
    is offered in it."""
    now = now or timezone.now()
    if template.card_count > 1:
        raise WhatIfRefused(
            gettext("%(template)s runs on whole cards; the planner counts labs on a share of one card.")
            % {"template": template.name}
        )
    minutes = (datetime.combine(first, end) - datetime.combine(first, start)).seconds // 60
    slots = slot_times(
        start=start, minutes=minutes, zone=timezone.get_default_timezone(), weekdays=[weekday], first=first, last=last
    )
    if not slots:
        raise WhatIfRefused(gettext("No such weekday between the first and the last date."))
    quotas = _quotas()
    if course.pk not in quotas:
        raise WhatIfRefused(gettext("%(course)s has no NPU quota yet.") % {"course": course.code})
    shape = lab_shape(
        template.core_percent,
        template.memory_mib,
        template.scenario,
        template.cpu_request_millicores,
        template.host_memory_request_mib,
    )
    new = [Booking(course.pk, s, e, shape, count, "new") for s, e in slots]
    bookings, info = _bookings(since=slots[0][0], until=slots[-1][1], scope=scope)
    answer = what_if(
        capacity_snapshot(),
        new,
        bookings=bookings,
        usual=_usual(history_weeks=history_weeks, now=now),
        quotas=quotas,
        config=placement_config(),
    )
    return WhatIfReport(answer.verdict, list(answer.hours), info, len(slots))


# --- for the page and the file --------------------------------------------------------------------

CSV_HEADER = (
    "hour",
    "card_type",
    "capacity_instances",
    "capacity_core_percent",
    "capacity_memory_mib",
    "booked_instances",
    "booked_core_percent",
    "booked_memory_mib",
    "usual_instances",
    "usual_core_percent",
    "usual_memory_mib",
    "guaranteed_instances",
    "guaranteed_core_percent",
    "guaranteed_memory_mib",
    "unplaced_instances",
    "unplaced_core_percent",
    "unplaced_memory_mib",
    "yours_instances",
    "yours_core_percent",
    "yours_memory_mib",
    "load_percent",
    "fits",
)


def _amounts(r: Resources) -> list[int]:
    return [r.instances, r.core_percent, r.memory_mib]


def plan_rows(report: PlanReport) -> Iterable[list[object]]:
    """One row per hour and card type, then one for the hour's whole cluster (card type "all"),
    which alone carries the guarantees (held as totals, on no card type), what found no card and
    the reader's own share."""
    for hour in report.hours:
        stamp = timezone.localtime(hour.start).isoformat()
        nothing = _amounts(Resources())
        for t in hour.card_types:
            yield [
                stamp,
                t.chip_type,
                *_amounts(t.capacity),
                *_amounts(t.booked),
                *_amounts(t.usual),
                *nothing,
                *nothing,
                *nothing,
                "",
                "",
            ]
        yield [
            stamp,
            "all",
            *_amounts(hour.capacity),
            *_amounts(hour.booked),
            *_amounts(hour.usual),
            *_amounts(hour.guaranteed),
            *_amounts(hour.unplaced_booked + hour.unplaced_usual),
            *_amounts(report.mine(hour)),
            hour.load_percent,
            "yes" if hour.fits else "no",
        ]


def plan_csv(report: PlanReport) -> str:
    return csv_document(CSV_HEADER, plan_rows(report))


def plan_heatmap(report: PlanReport) -> dict:
    """What the planner's heatmap (``labs/static/labs/planner.js``) draws: x the hour of the week,
    y the week, the value the hour's load (percent); labels in the reader's language."""
    days = [gettext("Mon"), gettext("Tue"), gettext("Wed"), gettext("Thu"), gettext("Fri"), gettext("Sat"), gettext("Sun")]
    weeks = [(report.first + timedelta(weeks=w)).isoformat() for w in range(report.weeks)]
    cells = [[n % HOURS_PER_WEEK, n // HOURS_PER_WEEK, h.load_percent, 0 if h.fits else 1] for n, h in enumerate(report.hours)]
    return {
        "hours": [f"{days[h // 24]} {h % 24:02d}:00" for h in range(HOURS_PER_WEEK)],
        "weeks": weeks,
        "cells": cells,
        "max": max([100, *(c[2] for c in cells)]),
        "labels": {"load": gettext("Load (%)"), "short": gettext("does not fit")},
    }
