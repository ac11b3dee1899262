"""The term capacity planner: hour by hour, what the courses' guarantees, the class bookings and
the usual self-paced use will take of the cluster, and whether a new class would fit.

Pure rules, no Django: data in (the cluster's nodes and cards, the booked slots, the usual use per
hour of the week, the guarantees and quotas), figures out. Nothing is booked or changed.

An hour is ``[start, start + 1 h)``. What it needs is placed on the cluster's cards as the engine
would place it (``Cluster.choose``, so a card's AI-Core floor, memory and instance caps count and
capacity stranded by fragmentation is not counted as room), on the cards as they are but empty, as
``labs.domain.reservations`` checks a booking:

1. the bookings whose slot overlaps the hour, each as its ``count`` instances of its shape, in
   the order given (the earlier booked first: it was accepted first);
2. in a what-if, the new class;
3. the usual self-paced use of that hour of the week (``usual_use``): per course and shape, the
   90th percentile over past weeks of the most instances that were live at once in that hour.

Each course's guarantee then holds, as totals (a guarantee has no shape, so it is not placed),
whatever part of it the course's placed instances do not already use; an hour is short when the
cluster's totals left do not cover those. Whatever does not fit on the cards is counted as
unplaced, per kind.

Amounts are ``Resources``: core percent, memory MiB, instances.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from labs.domain.checks import as_enum, check_int
from labs.domain.placement import DEFAULT_CONFIG, Cluster, LaunchRequest, NodeCapacity, PlacementConfig, instance_charge
from labs.domain.quota import CourseQuota, QuotaLedger, Resources
from labs.domain.reasons import Reason
from labs.domain.units import CORE_PERCENT_MAX, Scenario, node_instance_slots

HOUR = timedelta(hours=1)
HOURS_PER_WEEK = 7 * 24
# The ranges a caller may ask for (forms and the API take theirs from here).
MAX_WEEKS = 26
MAX_HISTORY_WEEKS = 26
DEFAULT_HISTORY_WEEKS = 8
MAX_CLASS_SIZE = 2000
USUAL_PERCENTILE = 90
_NOTHING = Resources()


class LabShape(NamedTuple):
    """What one instance asks for: AI-Core floor (%), NPU memory (MiB), scenario, host CPU
    (millicores) and host memory (MiB)."""

    core_percent: int
    memory_mib: int
    scenario: Scenario = Scenario.DEVELOPMENT
    cpu_millicores: int = 0
    host_memory_mib: int = 0

    def charge(self, count: int = 1) -> Resources:
        one = instance_charge(self.core_percent, self.memory_mib)
        return Resources(one.core_percent * count, one.memory_mib * count, one.instances * count)


def lab_shape(
    core_percent: int,
    memory_mib: int,
    scenario: Scenario | str = Scenario.DEVELOPMENT,
    cpu_millicores: int = 0,
    host_memory_mib: int = 0,
) -> LabShape:
    """A ``LabShape``, checked: core 0..100, memory >= 1 MiB, a known scenario, host figures >= 0."""
    check_int("LabShape", "core_percent", core_percent, 0, CORE_PERCENT_MAX)
    check_int("LabShape", "memory_mib", memory_mib, 1)
    check_int("LabShape", "cpu_millicores", cpu_millicores, 0)
    check_int("LabShape", "host_memory_mib", host_memory_mib, 0)
    return LabShape(
        core_percent, memory_mib, as_enum("LabShape", "scenario", scenario, Scenario), cpu_millicores, host_memory_mib
    )


@dataclass(frozen=True, slots=True)
class Booking:
    """``count`` instances of ``shape`` for ``course_id`` from ``starts_at`` to ``ends_at`` (aware):
    one slot of a class reservation, or of a what-if class. ``key`` is the caller's handle on it."""

    course_id: int
    starts_at: datetime
    ends_at: datetime
    shape: LabShape
    count: int
    key: Hashable = None

    def __post_init__(self) -> None:
        check_int("Booking", "count", self.count, 1, MAX_CLASS_SIZE)
        if self.starts_at.tzinfo is None or self.ends_at.tzinfo is None:
            raise ValueError("Booking: starts_at and ends_at must be aware datetimes")
        if self.ends_at <= self.starts_at:
            raise ValueError("Booking: ends_at must be after starts_at")


class UsualNeed(NamedTuple):
    """The usual self-paced use of one course in one hour of the week: ``count`` of ``shape``."""

    course_id: int
    shape: LabShape
    count: int


class PastSpan(NamedTuple):
    """One past hold from the usage ledger: ``course_id``'s instance of ``shape``, live from
    ``start`` to ``end`` (aware)."""

    course_id: int
    start: datetime
    end: datetime
    shape: LabShape


def percentile_ceil(values: Sequence[int], percent: int) -> int:
    """The ``percent`` percentile of ``values`` (linear between closest ranks, as numpy's
    default), rounded up to a whole number; 0 for no values. Integers only."""
    check_int("percentile_ceil", "percent", percent, 0, 100)
    ordered = sorted(values)
    if not ordered:
        return 0
    position = percent * (len(ordered) - 1)
    index, fraction = divmod(position, 100)
    low = ordered[index]
    high = ordered[index + 1] if fraction else low
    return -(-(low * 100 + fraction * (high - low)) // 100)


def hourly_peaks(intervals: Iterable[tuple[datetime, datetime]], hours: Sequence[datetime]) -> list[int]:
    """For each hour ``[h, h + 1 h)`` of ``hours`` (ascending), the most intervals live at once in it.

    An interval ``[start, end)`` that ends when another starts does not overlap it.
    """
    events = sorted([(s, 1) for s, e in intervals if e > s] + [(e, -1) for s, e in intervals if e > s])
    peaks = []
    live = 0
    i = 0
    n = len(events)
    for hour in hours:
        while i < n and events[i][0] <= hour:
            live += events[i][1]
            i += 1
        peak = live
        end = hour + HOUR
        while i < n and events[i][0] < end:
            live += events[i][1]
            i += 1
            peak = max(peak, live)
        peaks.append(peak)
    return peaks


def usual_use(
    spans: Iterable[PastSpan], *, weeks: Sequence[datetime], percent: int = USUAL_PERCENTILE
) -> dict[tuple[int, int], tuple[UsualNeed, ...]]:
    """The usual use per hour of the week, ``(weekday, hour)`` (0 = Monday) -> needs.

    ``weeks`` are the starts (Monday 00:00, aware, in the portal's zone) of the past weeks to learn
    from. For each course and shape, each hour of each of those weeks counts the most instances
    live at once (``hourly_peaks``); the usual count of an hour of the week is the ``percent``
    percentile of that hour over the weeks, a week without use counting 0. Hours whose usual count
    is 0 are left out.
    """
    check_int("usual_use", "weeks", len(weeks), 1, MAX_HISTORY_WEEKS)
    grid: list[datetime] = []
    for start in sorted(weeks):
        grid.extend(start + timedelta(hours=h) for h in range(HOURS_PER_WEEK))
    grouped: dict[tuple[int, LabShape], list[tuple[datetime, datetime]]] = defaultdict(list)
    for span in spans:
        grouped[(span.course_id, span.shape)].append((span.start, span.end))
    usual: dict[tuple[int, int], list[UsualNeed]] = defaultdict(list)
    for (course_id, shape), intervals in sorted(grouped.items()):
        peaks = hourly_peaks(intervals, grid)
        for hour_of_week in range(HOURS_PER_WEEK):
            counts = peaks[hour_of_week::HOURS_PER_WEEK]
            count = percentile_ceil(counts, percent)
            if count:
                usual[divmod(hour_of_week, 24)].append(UsualNeed(course_id, shape, count))
    return {key: tuple(needs) for key, needs in usual.items()}


# --- the figures of an hour -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CardTypeHour:
    """One card type in one hour: what its usable cards hold (``capacity``) and what the bookings
    (the what-if class included) and the usual use placed on them take."""

    chip_type: str
    capacity: Resources
    booked: Resources
    usual: Resources


@dataclass(frozen=True, slots=True)
class HourFigures:
    """One hour of the plan.

    ``card_types``: per card type, capacity and what was placed there. ``guaranteed``: the
    courses' guarantees beyond what their placed instances use, held as totals. ``unplaced_booked``
    and ``unplaced_usual``: what found no card. ``short``: the part of ``guaranteed`` the cluster's
    totals left do not cover. ``by_course``: what each course's placed instances charge.
    ``bookings``: the keys of the bookings in the hour. ``load_percent``: the largest of core,
    memory and instances of (placed + guaranteed + unplaced) over capacity, in percent.
    """

    start: datetime
    card_types: tuple[CardTypeHour, ...]
    guaranteed: Resources
    unplaced_booked: Resources
    unplaced_usual: Resources
    short: Resources
    by_course: Mapping[int, Resources]
    bookings: tuple[Hashable, ...]
    load_percent: int

    @property
    def capacity(self) -> Resources:
        return sum((t.capacity for t in self.card_types), _NOTHING)

    @property
    def booked(self) -> Resources:
        return sum((t.booked for t in self.card_types), _NOTHING)

    @property
    def usual(self) -> Resources:
        return sum((t.usual for t in self.card_types), _NOTHING)

    @property
    def fits(self) -> bool:
        """Whether everything the hour needs finds room: nothing unplaced, no guarantee short."""
        return self.unplaced_booked == _NOTHING and self.unplaced_usual == _NOTHING and self.short == _NOTHING

    def held_by(self, courses: Iterable[int]) -> Resources:
        """What the placed instances of ``courses`` charge in this hour."""
        return sum((self.by_course.get(c, _NOTHING) for c in courses), _NOTHING)


@dataclass(frozen=True)
class Plan:
    hours: tuple[HourFigures, ...]
    # Distinct hours placed (the others repeat one of them): what the work cost.
    evaluated: int = 0


def _empty(nodes: Iterable[NodeCapacity]) -> list[NodeCapacity]:
    return [replace(n, cards=tuple(replace(c, instances=(), unlisted_mib=0) for c in n.cards)) for n in nodes]


def _capacity_by_type(nodes: Sequence[NodeCapacity]) -> dict[str, Resources]:
    """Per card type: what the usable cards of available nodes hold (core %, MiB, instance slots)."""
    capacity: dict[str, Resources] = {}
    for node in nodes:
        if not node.available:
            continue
        usable: dict[str, list[int]] = defaultdict(list)
        for card in node.cards:
            if card.healthy:
                usable[card.chip_type].append(card.memory_mib)
        for chip_type, memories in usable.items():
            slots = node_instance_slots(len(memories), Scenario.DEVELOPMENT)
            held = Resources(CORE_PERCENT_MAX * len(memories), sum(memories), slots)
            capacity[chip_type] = capacity.get(chip_type, _NOTHING) + held
    return capacity


class _Need(NamedTuple):
    course_id: int
    shape: LabShape
    count: int
    kind: str  # "booked" or "usual"


class _Placer:
    """One empty cluster, reused for every hour: the hour's needs are placed, read, released."""

    def __init__(self, nodes: Sequence[NodeCapacity], guarantees: Mapping[int, Resources], config: PlacementConfig) -> None:
        empty = _empty(nodes)
        self.cluster = Cluster(empty, config)
        self.capacity = _capacity_by_type(empty)
        self.total = sum(self.capacity.values(), _NOTHING)
        self.guarantees = dict(guarantees)
        self.evaluated = 0

    def figures(self, needs: Sequence[_Need], start: datetime, bookings: tuple[Hashable, ...]) -> HourFigures:
        self.evaluated += 1
        placed: dict[tuple[str, str], list[int]] = {}  # (chip type, kind) -> [core, memory, instances]
        unplaced = {"booked": [0, 0, 0], "usual": [0, 0, 0]}
        by_course: dict[int, Resources] = {}
        keys: list[str] = []
        cluster = self.cluster
        for n, need in enumerate(needs):
            charge = need.shape.charge()
            request = None
            for i in range(need.count):
                request = LaunchRequest(
                    key=f"{n}-{i}",
                    course_id=need.course_id,
                    student_id=0,
                    core_percent=need.shape.core_percent,
                    memory_mib=need.shape.memory_mib,
                    scenario=need.shape.scenario,
                    cpu_millicores=need.shape.cpu_millicores,
                    host_memory_mib=need.shape.host_memory_mib,
                )
                choice = cluster.choose(request)
                if choice is None:
                    left = need.count - i
                    into = unplaced[need.kind]
                    into[0] += charge.core_percent * left
                    into[1] += charge.memory_mib * left
                    into[2] += charge.instances * left
                    break
                cluster.commit(request, choice)
                keys.append(request.key)
                sums = placed.setdefault((choice.cards[0].chip_type, need.kind), [0, 0, 0])
                sums[0] += charge.core_percent
                sums[1] += charge.memory_mib
                sums[2] += charge.instances
                by_course[need.course_id] = by_course.get(need.course_id, _NOTHING) + charge
        for key in keys:
            cluster.release(key)
        used = sum(by_course.values(), _NOTHING)
        guaranteed = _NOTHING
        for course_id, guarantee in self.guarantees.items():
            beyond = guarantee - by_course.get(course_id, _NOTHING)
            guaranteed = guaranteed + Resources(*(max(0, v) for v in beyond))
        left = self.total - used
        short = Resources(*(max(0, g - max(0, v)) for g, v in zip(guaranteed, left, strict=True)))
        card_types = tuple(
            CardTypeHour(
                chip_type,
                capacity,
                Resources(*placed.get((chip_type, "booked"), (0, 0, 0))),
                Resources(*placed.get((chip_type, "usual"), (0, 0, 0))),
            )
            for chip_type, capacity in sorted(self.capacity.items())
        )
        unplaced_booked = Resources(*unplaced["booked"])
        unplaced_usual = Resources(*unplaced["usual"])
        taken = used + guaranteed + unplaced_booked + unplaced_usual
        load = max((t * 100 // c if c else (100 if t else 0)) for t, c in zip(taken, self.total, strict=True))
        return HourFigures(start, card_types, guaranteed, unplaced_booked, unplaced_usual, short, by_course, bookings, load)


def _usual_key(start: datetime) -> tuple[int, int]:
    return start.weekday(), start.hour


def _needs(bookings: Sequence[Booking], extra: Booking | None, usual: Sequence[UsualNeed]) -> list[_Need]:
    needs = [_Need(b.course_id, b.shape, b.count, "booked") for b in bookings]
    if extra is not None:
        needs.append(_Need(extra.course_id, extra.shape, extra.count, "booked"))
    needs.extend(_Need(u.course_id, u.shape, u.count, "usual") for u in usual)
    return needs


def plan_hours(
    nodes: Iterable[NodeCapacity],
    hours: Sequence[datetime],
    *,
    bookings: Sequence[Booking] = (),
    usual: Mapping[tuple[int, int], Sequence[UsualNeed]] | None = None,
    guarantees: Mapping[int, Resources] | None = None,
    config: PlacementConfig = DEFAULT_CONFIG,
) -> Plan:
    """The figures of each hour of ``hours`` (aware starts, in the portal's zone: an hour's weekday
    and hour of day pick its usual use), in that order.

    ``bookings`` are placed in the order given (earlier bookings first); ``usual`` maps
    ``(weekday, hour)`` to that hour's usual needs (``usual_use``); ``guarantees`` maps course id to
    its guarantee. Hours that need the same (the same bookings and the same hour of the week) are
    placed once.
    """
    nodes = list(nodes)
    usual = usual or {}
    placer = _Placer(nodes, guarantees or {}, config)
    index = _Bookings(bookings)
    memo: dict[tuple, HourFigures] = {}
    out = []
    for start in hours:
        if start.tzinfo is None:
            raise ValueError("plan_hours: hours must be aware datetimes")
        present = [bookings[i] for i in index.overlapping(start)]
        # Hours with the same needs have the same figures: a term repeats its weeks.
        key = (tuple((b.course_id, b.shape, b.count) for b in present), _usual_key(start))
        keys = tuple(b.key for b in present)
        figures = memo.get(key)
        if figures is None:
            figures = memo[key] = placer.figures(_needs(present, None, usual.get(_usual_key(start), ())), start, keys)
        out.append(figures if figures.start == start else replace(figures, start=start, bookings=keys))
    return Plan(tuple(out), placer.evaluated)


class _Bookings:
    """Bookings sorted by start, with the overlapping ones of an hour found by bisection."""

    def __init__(self, bookings: Sequence[Booking]) -> None:
        self.order = sorted(range(len(bookings)), key=lambda i: bookings[i].starts_at)
        self.starts = [bookings[i].starts_at for i in self.order]
        self.bookings = bookings
        # The longest booking bounds how far back one may start and still overlap an hour.
        self.longest = max((b.ends_at - b.starts_at for b in bookings), default=timedelta(0))

    def overlapping(self, start: datetime) -> tuple[int, ...]:
        end = start + HOUR
        first = bisect_left(self.starts, start - self.longest)
        last = bisect_left(self.starts, end)
        return tuple(
            sorted(i for i in self.order[first:last] if self.bookings[i].ends_at > start and self.bookings[i].starts_at < end)
        )


# --- what if --------------------------------------------------------------------------------------


class Verdict(StrEnum):
    FITS = "fits"
    BORROWING = "fits_with_borrowing"
    NO = "does_not_fit"


_WORST = {Verdict.FITS: 0, Verdict.BORROWING: 1, Verdict.NO: 2}


@dataclass(frozen=True, slots=True)
class ClassHour:
    """One hour of the what-if class: its verdict, how many of its instances found a card
    (``placed``), what the quota rules said (``reason``, ``None`` when admitted), and the other
    bookings in that hour (``collisions``: their keys)."""

    start: datetime
    verdict: Verdict
    placed: int
    reason: Reason | None
    collisions: tuple[Hashable, ...]
    figures: HourFigures


@dataclass(frozen=True)
class WhatIf:
    """The answer for a new class: the worst verdict of its hours, and each hour."""

    verdict: Verdict
    hours: tuple[ClassHour, ...] = field(default_factory=tuple)

    @property
    def collisions(self) -> tuple[tuple[datetime, tuple[Hashable, ...]], ...]:
        """(hour, booking keys) for every hour of the class that shares it with other bookings."""
        return tuple((h.start, h.collisions) for h in self.hours if h.collisions)


def what_if(
    nodes: Iterable[NodeCapacity],
    new: Sequence[Booking],
    *,
    bookings: Sequence[Booking] = (),
    usual: Mapping[tuple[int, int], Sequence[UsualNeed]] | None = None,
    quotas: Mapping[int, CourseQuota] | None = None,
    config: PlacementConfig = DEFAULT_CONFIG,
) -> WhatIf:
    """Whether a new class (``new``: its slots, one course and shape) fits beside the ``bookings``,
    the ``usual`` use and every course's guarantee (from ``quotas``).

    For each hour a slot of the class overlaps, the hour is placed twice: without the class and
    with it (after the bookings, before the usual use). The hour's verdict:

    - ``FITS``: all of the class's instances find a card, no guarantee is left shorter than it was
      without the class, and the course's placed bookings in that hour (the class's included)
      stay within its guarantee;
    - ``BORROWING``: the instances find cards, but the class takes the course beyond its guarantee,
      and the quota rules (``QuotaLedger.check``: cohort, borrowing limit, what the rest of the
      cohort leaves idle in that hour) admit it as borrowing; the guarantees left short by the
      class are no more than what it borrows;
    - ``NO``: otherwise (the quota's ``Reason`` when the quota rules refused it).

    The class's verdict is its worst hour's. ``ValueError`` when ``new`` is empty or its slots are
    not all of one course and shape, or the course has no quota.
    """
    if not new:
        raise ValueError("what_if: the new class needs at least one slot")
    first = new[0]
    if any((b.course_id, b.shape, b.count) != (first.course_id, first.shape, first.count) for b in new):
        raise ValueError("what_if: every slot of the new class must be of one course, shape and count")
    quotas = dict(quotas or {})
    if first.course_id not in quotas:
        raise ValueError(f"what_if: course {first.course_id} has no quota")
    nodes = list(nodes)
    usual = usual or {}
    placer = _Placer(nodes, {c: q.guarantee for c, q in quotas.items()}, config)
    index = _Bookings(bookings)
    charge = first.shape.charge(first.count)
    quota = quotas[first.course_id]
    hours: list[ClassHour] = []
    seen: set[datetime] = set()
    for slot in sorted(new, key=lambda b: b.starts_at):
        start = slot.starts_at.replace(minute=0, second=0, microsecond=0)
        while start < slot.ends_at:
            if start in seen:
                start += HOUR
                continue
            seen.add(start)
            present = index.overlapping(start)
            others = [bookings[i] for i in present]
            needs_usual = usual.get(_usual_key(start), ())
            keys = tuple(b.key for b in others)
            before = placer.figures(_needs(others, None, needs_usual), start, keys)
            after = placer.figures(_needs(others, slot, needs_usual), start, (*keys, slot.key))
            placed = first.count - (after.unplaced_booked - before.unplaced_booked).instances
            grew = after.short - before.short
            own = sum((b.shape.charge(b.count) for b in others if b.course_id == first.course_id), _NOTHING)
            reason = None
            if placed < first.count:
                verdict = Verdict.NO
            elif (own + charge).fits_in(quota.guarantee):
                verdict = Verdict.FITS if not any(v > 0 for v in grew) else Verdict.NO
            else:
                usage = {c: before.by_course.get(c, _NOTHING) for c in quotas}
                usage[first.course_id] = own
                admission = QuotaLedger(quotas, usage).check(first.course_id, charge)
                borrowed = Resources(*(max(0, v) for v in (own + charge) - quota.guarantee))
                if not admission.admitted:
                    verdict, reason = Verdict.NO, admission.reason
                elif all(g <= b for g, b in zip(grew, borrowed, strict=True)):
                    verdict = Verdict.BORROWING
                else:
                    verdict = Verdict.NO
            hours.append(ClassHour(start, verdict, placed, reason, keys, after))
            start += HOUR
    worst = max((h.verdict for h in hours), key=_WORST.__getitem__, default=Verdict.FITS)
    return WhatIf(worst, tuple(hours))
