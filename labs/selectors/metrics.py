"""Reads for the portal's Prometheus endpoint: the whole cluster as the ledger has it, at scrape time.

Not scoped to a tenant: only the operator's scrape reaches them (``labs.metrics`` checks the
bearer token). Every value comes from the database, so each web process answers the same and
nothing depends on which process a scrape reaches. Each read is one or two aggregate queries;
what a query's cost grows with is said on each (cards and open sessions are bounded by the
cluster; whole-history counts grow with the tables).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from django.db.models import Count, Min, Q

from labs.domain.states import ACTIVE, POLICY_STOPS, RECLAIMABLE, SessionState
from labs.domain.units import Scenario, card_instance_cap
from labs.models import Card, Course, LabSession, Node, RepairEvent
from labs.selectors.ledger import held_by_card

# The states of a session that has not ended, in the machine's order.
OPEN_STATES = tuple(state for state in SessionState if state in ACTIVE)


class CardStatus(StrEnum):
    HEALTHY = "healthy"
    # Reported unhealthy (or no longer reported) by the node's agent.
    UNHEALTHY = "unhealthy"
    # Marked unhealthy by an operator in the console, whatever the agent says.
    DISABLED = "disabled"


def card_status(*, healthy: bool, disabled: bool) -> CardStatus:
    """Whether a card takes new placements (only when healthy), and if not, who said so."""
    if disabled:
        return CardStatus.DISABLED
    return CardStatus.HEALTHY if healthy else CardStatus.UNHEALTHY


@dataclass(frozen=True)
class CardUse:
    """One card with what the unreleased allocations on it reserve."""

    node: str
    index: int
    memory_mib: int
    status: CardStatus
    instances: int
    instance_limit: int
    core_percent_reserved: int
    memory_mib_reserved: int
    # As the node's agent last read them (npu-smi); None: not reported.
    memory_mib_used: int | None = None
    temperature_celsius: int | None = None
    power_milliwatts: int | None = None


def card_use() -> list[CardUse]:
    """Every card, with the AI Core floors, memory caps and instances the ledger has on it.

    Two queries (three with whole-card labs): the live allocations per card (``held_by_card``:
    the partial index of live allocations; grows with the allocations in use, not with history)
    and the cards with their node's name.
    The instance limit is the tightest scenario cap among the instances on the card (16, or 8
    once an inference instance is there), the rule placement uses. Plain rows, not model
    instances, which a scrape would build for every card (``bench.metrics_scale``).
    """
    live = held_by_card()
    cards = Card.objects.values_list(
        "pk",
        "node__name",
        "index",
        "memory_mib",
        "healthy",
        "disabled",
        "memory_used_mib",
        "temperature_celsius",
        "power_milliwatts",
    ).order_by("node__name", "index")
    # The rule's two outcomes, worked out once rather than per card (it is most of this read at 8,000 cards).
    with_inference = card_instance_cap([Scenario.INFERENCE, Scenario.DEVELOPMENT])
    development_only = card_instance_cap([Scenario.DEVELOPMENT])
    result = []
    for pk, node, index, memory_mib, healthy, disabled, used, celsius, milliwatts in cards:
        n, inference, core, memory = live.get(pk, (0, 0, 0, 0))
        limit = with_inference if inference else development_only
        status = card_status(healthy=healthy, disabled=disabled)
        result.append(CardUse(node, index, memory_mib, status, n, limit, core, memory, used, celsius, milliwatts))
    return result


class NodeStatus(StrEnum):
    AVAILABLE = "available"
    # Drained by an operator for maintenance: no new placements, its sessions go on.
    DRAINED = "drained"
    # Marked unavailable, by the reconciler because its agent does not answer (available again
    # once it does), or by hand in the admin.
    UNAVAILABLE = "unavailable"


def node_status(*, available: bool, drained: bool) -> NodeStatus:
    """Whether a node takes new placements (only when available), and if not, why; a drain comes first."""
    if drained:
        return NodeStatus.DRAINED
    return NodeStatus.AVAILABLE if available else NodeStatus.UNAVAILABLE


@dataclass(frozen=True)
class NodeState:
    """A node's status and what it runs, as its agent last read it (``""``: not reported)."""

    name: str
    status: NodeStatus
    driver_version: str = ""
    firmware_version: str = ""
    npu_smi_version: str = ""


def node_statuses() -> list[NodeState]:
    """Every node's name, status and versions, by name (one query over the nodes)."""
    rows = Node.objects.values_list(
        "name", "available", "drained", "driver_version", "firmware_version", "npu_smi_version"
    ).order_by("name")
    return [
        NodeState(name, node_status(available=available, drained=drained), driver, firmware, npu_smi)
        for name, available, drained, driver, firmware, npu_smi in rows
    ]


def failed_sessions() -> int:
    """Sessions that ever ended failed.

    One count on the index of (state, created_at): it grows with the failed sessions kept, not
    with the stopped ones (the bulk of the history, which is why no total of those is read).
    """
    return LabSession.objects.filter(state=SessionState.FAILED).count()


@dataclass(frozen=True)
class CourseKey:
    institution: str
    code: str
    term: str


@dataclass(frozen=True)
class CourseSessions:
    """A course's open sessions per open state and since when its oldest queued session waits."""

    course: CourseKey
    by_state: dict[SessionState, int]
    oldest_queued_at: datetime | None


def open_sessions_by_course() -> list[CourseSessions]:
    """Every course that is not archived or has open sessions, with its open sessions per state.

    Two queries: the courses, and the open sessions grouped by course and state (the index on
    state; grows with the open sessions, not with history). Courses without open sessions are
    listed with zeros, so that a course's queue reads 0 rather than nothing.
    """
    rows = (
        LabSession.objects.filter(state__in=OPEN_STATES)
        .values("course_id", "state")
        .annotate(n=Count("id"), oldest=Min("created_at"))
        .values_list("course_id", "state", "n", "oldest")
        .order_by()
    )
    counts: dict[int, dict[SessionState, int]] = {}
    oldest: dict[int, datetime] = {}
    for course_id, state, n, first in rows:
        counts.setdefault(course_id, {})[SessionState(state)] = n
        if state == SessionState.QUEUED:
            oldest[course_id] = first
    courses = (
        Course.objects.filter(Q(archived_at__isnull=True) | Q(pk__in=list(counts)))
        .values_list("pk", "institution__slug", "code", "term")
        .order_by("institution__slug", "code", "term")
    )
    return [
        CourseSessions(
            CourseKey(slug, code, term),
            {state: counts.get(pk, {}).get(state, 0) for state in OPEN_STATES},
            oldest.get(pk),
        )
        for pk, slug, code, term in courses
    ]


@dataclass(frozen=True)
class Admission:
    admitted_at: datetime
    wait_seconds: float


def admissions_since(since: datetime) -> list[Admission]:
    """Sessions admitted at or after ``since``, each with how long it was queued (launch to admission).

    One query; ``LabSession.admitted_at`` has no index, so it reads the whole session table.
    """
    return [
        Admission(admitted_at, (admitted_at - created_at).total_seconds())
        for admitted_at, created_at in LabSession.objects.filter(admitted_at__gte=since)
        .values_list("admitted_at", "created_at")
        .order_by()
    ]


def repair_event_totals() -> dict[str, int]:
    """Repair events ever recorded, per kind, every kind present (0 when none).

    One GROUP BY over the whole repair-event table: it grows with the history kept.
    """
    counts = dict(RepairEvent.objects.values_list("kind").annotate(n=Count("id")).values_list("kind", "n").order_by())
    return {kind: counts.get(kind, 0) for kind in RepairEvent.Kind.values}


def policy_stops() -> dict[str, int]:
    """Sessions each stopping policy ended (every policy present, 0 when none)."""
    counts = dict(
        LabSession.objects.filter(reason_code__in=POLICY_STOPS)
        .values("reason_code")
        .annotate(n=Count("id"))
        .values_list("reason_code", "n")
        .order_by()
    )
    return {code.removeprefix("session."): counts.get(code, 0) for code in POLICY_STOPS}


def reservation_totals() -> dict[str, int]:
    """Sessions pre-started for class reservations (``starts``), handed to a student (``claims``:
    reservations honoured) and stopped because nobody claimed them in time (``unclaimed``).

    One query over the pre-started sessions (a join-free filter on ``reservation_slot``).
    """
    return LabSession.objects.filter(reservation_slot__isnull=False).aggregate(
        starts=Count("pk"),
        claims=Count("pk", filter=Q(claimed_at__isnull=False)),
        unclaimed=Count("pk", filter=Q(reason_code="session.reservation_unclaimed")),
    )


def isolation_suspect_cards() -> int:
    """Cards marked isolation-suspect by a self-test and not cleared yet."""
    return Card.objects.filter(isolation_suspect=True).count()


def reclaims_pending() -> int:
    """Sessions warned of a reclaim that still hold their capacity (``labs.services.allocation._reclaim_follow``);
    not those warned because their node is being emptied for maintenance (``labs.services.evacuation``)."""
    return (
        LabSession.objects.filter(reclaim_at__isnull=False, state__in=RECLAIMABLE)
        .exclude(allocation__card__node__evacuate_at__isnull=False)
        .count()
    )


def guarantee_breaches_since(since: datetime) -> list[tuple[str, int]]:
    """Guarantee breaches recorded at or after ``since``, per node name ("" for a deleted node).

    One query on the index of ``created_at``: grows with the events of the window.
    """
    return list(
        RepairEvent.objects.filter(kind=RepairEvent.Kind.GUARANTEE_BREACH, created_at__gte=since)
        .values_list("node__name")
        .annotate(n=Count("id"))
        .values_list("node__name", "n")
        .order_by("node__name")
    )
