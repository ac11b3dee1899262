"""Class reservations: a course books N sessions of one shape for its meeting times.

Pure rules, no Django: turning a booking (weekly on chosen weekdays from a first to a last
date, or a list of single dates; a start time of day and a length) into concrete slots in the
portal's time zone, and checking whether the cluster can hold a slot's sessions beside what is
already promised at that time.

The capacity check places the sessions on the cluster as the engine would (``Cluster.choose``,
the per-card AI-Core floor, memory and instance caps), on the cards as they are but empty: a
slot is in the future, and what runs now will have ended or is borrowed (reclaimed when the
class needs it). What is promised at that time is placed or charged first:

- the other bookings whose slots overlap it (any course, this one included), each as its N
  instances of its own shape, placed before this one;
- the guarantees of every other course, beyond what their overlapping bookings already place,
  charged as totals (core %, MiB, instances) against what the cluster has left: a guarantee has
  no shape, so it is held as amounts, not placed.

The slot fits when all N of its instances are placed and the totals left cover those
guarantees. ``slot_room`` says how many of the N the cluster can hold; ``slot_check`` says it
with what else holds the cluster then (each booking and each guarantee, and how much), for a
refusal that names them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta, tzinfo

from labs.domain.checks import check_int
from labs.domain.placement import (
    DEFAULT_CONFIG,
    CardCapacity,
    Cluster,
    LaunchRequest,
    NodeCapacity,
    PlacementConfig,
    instance_charge,
)
from labs.domain.quota import Resources
from labs.domain.units import CORE_PERCENT_MAX, Scenario, node_instance_slots

# A booking longer than this many slots is a mistake (a term of daily classes is under 200).
MAX_SLOTS = 400
_NOTHING = Resources()


@dataclass(frozen=True, slots=True)
class Demand:
    """``count`` instances of ``core_percent`` % / ``memory_mib`` MiB in ``scenario``."""

    core_percent: int
    memory_mib: int
    count: int
    scenario: Scenario = Scenario.DEVELOPMENT
    # Host CPU (millicores) and memory (MiB) each instance's pod requests on its node.
    cpu_millicores: int = 0
    host_memory_mib: int = 0

    def __post_init__(self) -> None:
        check_int("Demand", "core_percent", self.core_percent, 1, CORE_PERCENT_MAX)
        check_int("Demand", "cpu_millicores", self.cpu_millicores, 0)
        check_int("Demand", "host_memory_mib", self.host_memory_mib, 0)
        check_int("Demand", "memory_mib", self.memory_mib, 1)
        check_int("Demand", "count", self.count, 0)

    @property
    def charge(self) -> Resources:
        """What the ``count`` instances charge their course (``instance_charge`` each)."""
        one = instance_charge(self.core_percent, self.memory_mib)
        return Resources(one.core_percent * self.count, one.memory_mib * self.count, one.instances * self.count)


def slot_times(
    *,
    start: time,
    minutes: int,
    zone: tzinfo,
    dates: Iterable[date] = (),
    weekdays: Iterable[int] = (),
    first: date | None = None,
    last: date | None = None,
    after: datetime | None = None,
) -> list[tuple[datetime, datetime]]:
    """The slots of a booking as aware (start, end) pairs in ``zone``, in time order, no repeats.

    Either ``dates`` (single dates) or ``weekdays`` (0 = Monday .. 6 = Sunday) from ``first``
    to ``last`` inclusive; both may be given and are merged. ``start`` is a wall-clock time in
    ``zone`` (a class at 14:00 stays at 14:00 across a daylight-saving change). With ``after``
    (an aware moment, usually now) a weekly booking starts at its next meeting: its slots that
    begin at or before ``after`` are left out, so a term booked in its third week starts with
    the next class. Single dates are kept whatever their time: booking one in the past is a
    mistake for the caller to refuse. ``ValueError`` for minutes < 1, a weekday outside 0..6,
    weekdays without both ends or ends reversed, a naive ``after``, or more than ``MAX_SLOTS``
    slots.
    """
    check_int("slot_times", "minutes", minutes, 1, 24 * 60)
    if after is not None and after.tzinfo is None:
        raise ValueError("slot_times: after must be an aware datetime")
    days = set(dates)
    weekdays = set(weekdays)
    if any(not isinstance(d, int) or not 0 <= d <= 6 for d in weekdays):
        raise ValueError(f"slot_times: weekdays must be 0..6 (Monday..Sunday), not {sorted(weekdays)!r}")
    if weekdays:
        if first is None or last is None:
            raise ValueError("slot_times: a weekly booking needs a first and a last date")
        if last < first:
            raise ValueError("slot_times: the last date is before the first")
        if (last - first).days > 7 * MAX_SLOTS:
            raise ValueError(f"slot_times: more than {MAX_SLOTS} slots")
        day = first
        while day <= last:
            if day.weekday() in weekdays and (after is None or datetime.combine(day, start, tzinfo=zone) > after):
                days.add(day)
            day += timedelta(days=1)
    if len(days) > MAX_SLOTS:
        raise ValueError(f"slot_times: more than {MAX_SLOTS} slots")
    slots = []
    for day in sorted(days):
        begins = datetime.combine(day, start, tzinfo=zone)
        slots.append((begins, begins + timedelta(minutes=minutes)))
    return slots


def _empty(nodes: Iterable[NodeCapacity]) -> list[NodeCapacity]:
    return [replace(n, cards=tuple(replace(c, instances=(), unlisted_mib=0) for c in n.cards)) for n in nodes]


def _totals(nodes: Sequence[NodeCapacity]) -> Resources:
    """What the usable cards of available nodes hold in all: core %, MiB and instance slots."""
    core = memory = instances = 0
    for node in nodes:
        if not node.available:
            continue
        usable: list[CardCapacity] = [c for c in node.cards if c.healthy]
        core += CORE_PERCENT_MAX * len(usable)
        memory += sum(c.memory_mib for c in usable)
        instances += node_instance_slots(len(usable), Scenario.DEVELOPMENT)
    return Resources(core, memory, instances)


def _place(cluster: Cluster, demand: Demand, count: int, prefix: str) -> int:
    """Place up to ``count`` copies of ``demand``'s shape; how many were placed."""
    for i in range(count):
        request = LaunchRequest(
            key=f"{prefix}{i}",
            course_id=0,
            student_id=0,
            core_percent=demand.core_percent,
            memory_mib=demand.memory_mib,
            scenario=demand.scenario,
            cpu_millicores=demand.cpu_millicores,
            host_memory_mib=demand.host_memory_mib,
        )
        choice = cluster.choose(request)
        if choice is None:
            return i
        cluster.commit(request, choice)
    return count


def slot_room(
    nodes: Iterable[NodeCapacity],
    want: Demand,
    *,
    others: Sequence[Demand] = (),
    held_elsewhere: Resources = _NOTHING,
    config: PlacementConfig = DEFAULT_CONFIG,
) -> int:
    """How many of ``want.count`` instances the cluster can hold at a slot (0..``want.count``).

    ``nodes`` is the capacity snapshot (its instances are ignored: see the module docstring);
    ``others`` the overlapping bookings, placed first (one that does not fit whole is placed
    as far as it goes: it was accepted against an earlier cluster); ``held_elsewhere`` the other
    courses' guarantees beyond their bookings, which must still be left over as totals.
    """
    empty = _empty(nodes)
    cluster = Cluster(empty, config)
    for n, other in enumerate(others):
        _place(cluster, other, other.count, f"other{n}-")
    left = _totals(empty) - sum((o.charge for o in others), Resources()) - held_elsewhere
    placed = _place(cluster, want, want.count, "want-")
    while placed and not replace(want, count=placed).charge.fits_in(left):
        placed -= 1
    return placed


@dataclass(frozen=True, slots=True)
class Booked:
    """Another booking whose slot overlaps the one checked: ``course_id``'s ``demand``, with
    ``key`` the caller's handle on it (to name it in a refusal)."""

    course_id: int
    demand: Demand
    key: Hashable = None


@dataclass(frozen=True, slots=True)
class Held:
    """What holds part of the cluster at a slot: a booking (``booking`` set) or ``course_id``'s
    guarantee beyond its bookings then (``booking`` None), and how much (``amount``)."""

    course_id: int
    amount: Resources
    booking: Booked | None = None


@dataclass(frozen=True, slots=True)
class SlotCheck:
    """``room``: how many of the wanted instances fit beside everything held then (``slot_room``);
    ``alone``: how many the cluster holds with nothing else booked or guaranteed; ``held``: what
    else holds the cluster then, largest first (core %, then memory)."""

    room: int
    alone: int
    held: tuple[Held, ...]


def slot_check(
    nodes: Iterable[NodeCapacity],
    want: Demand,
    *,
    bookings: Sequence[Booked] = (),
    guarantees: Mapping[int, Resources] | None = None,
    config: PlacementConfig = DEFAULT_CONFIG,
) -> SlotCheck:
    """How many of ``want`` a slot holds beside the ``bookings`` overlapping it and the other
    courses' ``guarantees`` (course id -> guaranteed totals), and what each of those holds.

    A course's guarantee counts only beyond what its own overlapping bookings charge (a class
    booked inside its guarantee is not held twice); a guarantee its bookings cover is not
    listed. ``alone`` is 0..``want.count`` as ``room`` is.
    """
    nodes = list(nodes)
    reserved: dict[int, Resources] = {}
    for b in bookings:
        reserved[b.course_id] = reserved.get(b.course_id, _NOTHING) + b.demand.charge
    held = [Held(b.course_id, b.demand.charge, b) for b in bookings]
    for course_id, guarantee in (guarantees or {}).items():
        beyond = Resources(*(max(0, v) for v in guarantee - reserved.get(course_id, _NOTHING)))
        if beyond != _NOTHING:
            held.append(Held(course_id, beyond))
    beyond_bookings = sum((h.amount for h in held if h.booking is None), _NOTHING)
    room = slot_room(nodes, want, others=[b.demand for b in bookings], held_elsewhere=beyond_bookings, config=config)
    alone = slot_room(nodes, want, config=config) if room < want.count else room
    held.sort(key=lambda h: (-h.amount.core_percent, -h.amount.memory_mib, h.course_id))
    return SlotCheck(room, alone, tuple(held))


def room_now(nodes: Iterable[NodeCapacity], wants: Sequence[Demand], *, config: PlacementConfig = DEFAULT_CONFIG) -> list[int]:
    """How many of each demand's ``count`` instances the placeable nodes hold now, beside the
    instances ``nodes`` list and the demands before it (each 0..``count``, in ``wants``' order):
    where sessions that must leave a node can go. Placement only: quotas are the allocation
    pass's to apply."""
    cluster = Cluster(list(nodes), config)
    return [_place(cluster, want, want.count, f"now{n}-") for n, want in enumerate(wants)]
