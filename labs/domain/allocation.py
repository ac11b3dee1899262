"""Admission and placement of a batch of queued launch requests.

``allocate`` is what one allocation pass decides: for each request, in queue order, either a
placement on one card, a wait (with the reason in words), or a refusal (it can never be
satisfied as configured). The capacity snapshot and usage are inputs; nothing here reads a
clock, a database or the network, so the same inputs always give the same decisions.

Invariants the result never breaks (DESIGN §3), counting what the snapshot already holds:
per card, Σ core floors ≤ 100, Σ memory caps ≤ card memory, instances ≤ the tightest scenario
cap on the card (16 development / 8 inference); per node, instances ≤ 128 / 64.
Admission: a course never goes over its guaranteed core percent, memory or instance count, and
a student never over their concurrent-session limit.

The placement policy here is a simple binpack (most-used card that fits first); the full engine
with policies, borrowing and reclaim replaces it behind the same function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from labs.domain.units import (
    CORE_PERCENT_MAX,
    MEMORY_GRANULE_MIB,
    Scenario,
    card_instance_cap,
    node_instance_cap,
)


@dataclass(frozen=True)
class Instance:
    """An instance already on a card: its guaranteed floor, memory cap and scenario."""

    core_percent: int
    memory_mib: int
    scenario: Scenario


@dataclass(frozen=True)
class CardCapacity:
    card_id: int
    index: int
    memory_mib: int
    healthy: bool = True
    instances: tuple[Instance, ...] = ()


@dataclass(frozen=True)
class NodeCapacity:
    name: str
    cards: tuple[CardCapacity, ...]
    available: bool = True


@dataclass(frozen=True)
class LaunchRequest:
    key: str
    course_id: int
    student_id: int
    core_percent: int
    memory_mib: int
    scenario: Scenario


@dataclass(frozen=True)
class CourseLimits:
    """A course's guarantee and its per-student limit."""

    core_percent: int
    memory_mib: int
    instances: int
    sessions_per_student: int


@dataclass(frozen=True)
class CourseUsage:
    core_percent: int = 0
    memory_mib: int = 0
    instances: int = 0


@dataclass(frozen=True)
class Placed:
    key: str
    card_id: int
    node: str
    card_index: int


@dataclass(frozen=True)
class Waiting:
    """Not admitted now; may be later. ``reason`` is shown to the student."""

    key: str
    reason: str


@dataclass(frozen=True)
class Refused:
    """Can never be admitted as configured (the template is larger than any card or the guarantee)."""

    key: str
    reason: str


Decision = Placed | Waiting | Refused


@dataclass
class _Card:
    card_id: int
    node: str
    index: int
    memory_mib: int
    healthy: bool
    core_used: int = 0
    memory_used: int = 0
    scenarios: list[Scenario] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.scenarios)

    def fits(self, request: LaunchRequest) -> bool:
        return (
            self.core_used + request.core_percent <= CORE_PERCENT_MAX
            and self.memory_used + request.memory_mib <= self.memory_mib
            and self.count + 1 <= card_instance_cap([*self.scenarios, request.scenario])
        )


@dataclass
class _Node:
    name: str
    available: bool
    cards: list[_Card]
    scenarios: list[Scenario] = field(default_factory=list)

    def has_room(self, scenario: Scenario) -> bool:
        return len(self.scenarios) + 1 <= node_instance_cap([*self.scenarios, scenario])


def allocate(
    nodes: Iterable[NodeCapacity],
    requests: Sequence[LaunchRequest],
    limits: Mapping[int, CourseLimits],
    course_usage: Mapping[int, CourseUsage],
    student_active: Mapping[tuple[int, int], int],
) -> list[Decision]:
    """Decide every request in order; one that cannot be placed does not stop the rest.

    ``course_usage`` is what each course's unreleased allocations hold; ``student_active``
    maps (course_id, student_id) to the sessions that student already holds an allocation
    for in that course. Returns one decision per request, in request order.
    """
    working = [_build_node(node) for node in nodes]
    usage = {course_id: CourseUsage(u.core_percent, u.memory_mib, u.instances) for course_id, u in course_usage.items()}
    active = dict(student_active)
    largest_card_mib = max((c.memory_mib for n in working for c in n.cards), default=0)
    decisions: list[Decision] = []

    for request in requests:
        refusal = _never_fits(request, limits.get(request.course_id), largest_card_mib)
        if refusal:
            decisions.append(Refused(request.key, refusal))
            continue
        course = limits[request.course_id]
        held = usage.get(request.course_id, CourseUsage())
        student_key = (request.course_id, request.student_id)
        wait = _quota_wait(request, course, held, active.get(student_key, 0))
        if wait:
            decisions.append(Waiting(request.key, wait))
            continue
        chosen = _binpack(working, request)
        if chosen is None:
            decisions.append(Waiting(request.key, _capacity_reason(working, request)))
            continue
        node, card = chosen
        card.core_used += request.core_percent
        card.memory_used += request.memory_mib
        card.scenarios.append(request.scenario)
        node.scenarios.append(request.scenario)
        usage[request.course_id] = CourseUsage(
            held.core_percent + request.core_percent, held.memory_mib + request.memory_mib, held.instances + 1
        )
        active[student_key] = active.get(student_key, 0) + 1
        decisions.append(Placed(request.key, card.card_id, node.name, card.index))
    return decisions


def _build_node(node: NodeCapacity) -> _Node:
    cards = []
    scenarios: list[Scenario] = []
    for card in node.cards:
        working = _Card(card.card_id, node.name, card.index, card.memory_mib, card.healthy)
        for instance in card.instances:
            working.core_used += instance.core_percent
            working.memory_used += instance.memory_mib
            working.scenarios.append(instance.scenario)
        scenarios.extend(working.scenarios)
        cards.append(working)
    return _Node(node.name, node.available, cards, scenarios)


def _never_fits(request: LaunchRequest, course: CourseLimits | None, largest_card_mib: int) -> str | None:
    if not 1 <= request.core_percent <= CORE_PERCENT_MAX:
        return f"core: {request.core_percent} % is outside 1..{CORE_PERCENT_MAX} %"
    if request.memory_mib <= 0 or request.memory_mib % MEMORY_GRANULE_MIB:
        return f"memory: {request.memory_mib} MiB is not a positive multiple of {MEMORY_GRANULE_MIB} MiB"
    if course is None:
        return "course quota: the course has no quota; ask the instructor to set one"
    if request.core_percent > course.core_percent:
        return f"course quota: needs {request.core_percent} % core; the course's guarantee is {course.core_percent} %"
    if request.memory_mib > course.memory_mib:
        return f"course quota: needs {request.memory_mib} MiB; the course's guarantee is {course.memory_mib} MiB"
    if course.instances < 1:
        return "course quota: the course's guarantee allows no instances"
    if request.memory_mib > largest_card_mib:
        if largest_card_mib == 0:
            return "capacity: the cluster has no NPU cards"
        return f"card memory: needs {request.memory_mib} MiB; the largest card has {largest_card_mib} MiB"
    return None


def _quota_wait(request: LaunchRequest, course: CourseLimits, held: CourseUsage, student_sessions: int) -> str | None:
    if student_sessions + 1 > course.sessions_per_student:
        return f"student limit: {student_sessions} of {course.sessions_per_student} concurrent sessions in use"
    if held.instances + 1 > course.instances:
        return f"course quota: {held.instances} of {course.instances} instances in use"
    if held.core_percent + request.core_percent > course.core_percent:
        return f"course quota: {held.core_percent} of {course.core_percent} % core in use; needs {request.core_percent} % more"
    if held.memory_mib + request.memory_mib > course.memory_mib:
        return f"course quota: {held.memory_mib} of {course.memory_mib} MiB in use; needs {request.memory_mib} MiB more"
    return None


def _binpack(nodes: list[_Node], request: LaunchRequest) -> tuple[_Node, _Card] | None:
    """The fitting card with the most core, then memory, then instances in use; ties by order."""
    best: tuple[_Node, _Card] | None = None
    best_score: tuple[int, int, int] | None = None
    for node in nodes:
        if not node.available or not node.has_room(request.scenario):
            continue
        for card in node.cards:
            if not card.healthy or not card.fits(request):
                continue
            score = (card.core_used, card.memory_used, card.count)
            if best_score is None or score > best_score:
                best, best_score = (node, card), score
    return best


def _capacity_reason(nodes: list[_Node], request: LaunchRequest) -> str:
    """Name the binding constraint, with numbers, for a request no card can take now."""
    usable = [(n, c) for n in nodes if n.available for c in n.cards if c.healthy]
    if not usable:
        return "capacity: no healthy NPU card is available"
    full_nodes = [n.name for n in nodes if n.available and not n.has_room(request.scenario)]
    open_cards = [(n, c) for n, c in usable if n.has_room(request.scenario)]
    if not open_cards:
        cap = node_instance_cap([request.scenario])
        return f"node instances: every available node holds its maximum of {cap} instances ({', '.join(full_nodes)})"
    roomy = [(n, c) for n, c in open_cards if c.count + 1 <= card_instance_cap([*c.scenarios, request.scenario])]
    if not roomy:
        return f"card instances: every healthy card holds its maximum of {card_instance_cap([request.scenario])} instances"
    node, card = max(roomy, key=lambda nc: (CORE_PERCENT_MAX - nc[1].core_used, -nc[1].index))
    free_core = CORE_PERCENT_MAX - card.core_used
    if free_core < request.core_percent:
        return (
            f"card core: needs {request.core_percent} %; the most free on a healthy card is {free_core} % "
            f"(node {node.name}, card {card.index})"
        )
    node, card = max(roomy, key=lambda nc: (nc[1].memory_mib - nc[1].memory_used, -nc[1].index))
    free_mib = card.memory_mib - card.memory_used
    if free_mib < request.memory_mib:
        return (
            f"card memory: needs {request.memory_mib} MiB; the most free on a healthy card is {free_mib} MiB "
            f"(node {node.name}, card {card.index})"
        )
    return f"capacity: no single card has both {request.core_percent} % core and {request.memory_mib} MiB free"
