"""Reads for the operator console: the cluster card by card, a card's instances, repairs, audit.

An operator of an institution sees the shared hardware whole (cards, use, health) but only
their own institution's sessions by name; a platform operator (superuser or the
``labs.operate_platform`` permission) sees everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext, ngettext

from labs.domain.placement import Cluster
from labs.domain.states import TERMINAL
from labs.domain.units import CARD_INSTANCE_CAP, NODE_INSTANCE_CAP, Scenario
from labs.models import Allocation, AuditEvent, Card, InstanceSample, Institution, InstitutionRole, LabSession, Node, RepairEvent
from labs.models.cluster import node_allocatable
from labs.presentation import cards_text, nodes_text, nothing_stranded_text
from labs.selectors.capacity import capacity_snapshot, placement_config
from labs.selectors.ledger import held_by_card


@dataclass(frozen=True)
class OperatorScope:
    platform: bool
    institutions: frozenset[int] = field(default_factory=frozenset)

    def sees_institution(self, institution_id: int | None) -> bool:
        return self.platform or institution_id in self.institutions


def operator_scope(*, user) -> OperatorScope | None:
    """What ``user`` may see and do as an operator; ``None`` when they are no operator."""
    if not user.is_authenticated:
        return None
    if user.is_superuser or user.has_perm("labs.operate_platform"):
        return OperatorScope(platform=True)
    mine = frozenset(
        InstitutionRole.objects.filter(user=user, role=InstitutionRole.Role.OPERATOR).values_list("institution_id", flat=True)
    )
    return OperatorScope(platform=False, institutions=mine) if mine else None


# --- the cluster -------------------------------------------------------------------------------


@dataclass
class CardView:
    pk: int
    index: int
    chip_type: str
    memory_mib: int
    healthy: bool  # as the agent reports it
    disabled: bool  # marked unhealthy by an operator
    disabled_reason: str
    core_percent: int = 0
    memory_reserved_mib: int = 0
    instances: int = 0
    cap: int = CARD_INSTANCE_CAP[Scenario.DEVELOPMENT]
    memory_used_mib: int | None = None  # measured by the agent
    isolation_suspect: bool = False  # a session's isolation self-test saw more than its cap
    # As the agent last read them from npu-smi; None: not reported.
    temperature_celsius: int | None = None
    power_milliwatts: int | None = None

    @property
    def power_watts(self) -> float | None:
        return None if self.power_milliwatts is None else self.power_milliwatts / 1000

    @property
    def usable(self) -> bool:
        return self.healthy and not self.disabled

    @property
    def full(self) -> bool:
        return self.instances >= self.cap or self.core_percent >= 100 or self.memory_reserved_mib >= self.memory_mib

    @property
    def level(self) -> int:
        """How full, 0..10, by the scarcest of AI Core, memory and instance slots (the heatmap's shade)."""
        share = max(self.core_percent / 100, self.memory_reserved_mib / (self.memory_mib or 1), self.instances / self.cap)
        return min(10, round(share * 10))


@dataclass
class NodeView:
    pk: int
    name: str
    available: bool
    unavailable_reason: str
    drained: bool
    drain_reason: str
    last_seen_at: datetime | None
    card_truth: str
    cards: list[CardView]
    sessions: int = 0  # instances still held on it (what a drain waits for)
    cap: int = NODE_INSTANCE_CAP[Scenario.DEVELOPMENT]
    # Host CPU (millicores) and memory (MiB) for lab sessions after the reserve; None: the
    # node reports none (an old agent) and placement does not limit it.
    host_cpu_millicores: int | None = None
    host_memory_mib: int | None = None
    # What the node runs as its agent last read it; "" for one not reported.
    driver_version: str = ""
    firmware_version: str = ""
    npu_smi_version: str = ""
    # Being emptied for maintenance by this time (labs.services.evacuation); None: it is not.
    evacuate_at: datetime | None = None
    # What its agent listed at the last reconcile; None: no agent, or none reported yet.
    has_agent: bool = False
    instances_reported: int | None = None
    # Why the node does not meet its device profile's preconditions, in the reader's language
    # (labs.domain.readiness); "" when it does. An unready node takes no placements.
    unready_reason: str = ""

    @property
    def empty(self) -> bool:
        """Nothing in the ledger on it and nothing its agent reports: safe to upgrade its NPU plugin."""
        return not self.sessions and (not self.has_agent or self.instances_reported == 0)

    @property
    def evacuation_text(self) -> str:
        """Where its emptying stands, in the active language; "" when it is not being emptied."""
        if self.evacuate_at is None:
            return ""
        if self.empty:
            return gettext("empty — safe to upgrade the NPU plugin")
        if not self.sessions:
            return gettext("no lab left; waiting for the node's agent to report no instance")
        return ngettext(
            "%(n)s lab left, empty at %(time)s", "%(n)s labs left, empty at %(time)s", self.sessions
        ) % {"n": self.sessions, "time": timezone.localtime(self.evacuate_at).strftime("%H:%M")}


def cluster_state() -> list[NodeView]:
    """Every node and card with what the ledger holds on it: three queries whatever the cluster's
    size (four with whole-card labs)."""
    _no_counts = (0, NODE_INSTANCE_CAP[Scenario.DEVELOPMENT])
    held = held_by_card()
    nodes = {
        n.pk: NodeView(
            n.pk,
            n.name,
            n.available,
            n.unavailable_reason,
            n.drained,
            n.drain_reason,
            n.last_seen_at,
            n.card_truth,
            [],
            *_no_counts,
            *node_allocatable(n.host_cpu_millicores, n.host_memory_mib),
            n.driver_version,
            n.firmware_version,
            n.npu_smi_version,
            n.evacuate_at,
            bool(n.agent_url),
            n.instances_reported,
            n.readiness_reason,
        )
        for n in Node.objects.order_by("name")
    }
    for card in Card.objects.order_by("node_id", "index"):
        n, inference, core, memory = held.get(card.pk, (0, 0, 0, 0))
        view = CardView(
            card.pk,
            card.index,
            card.chip_type,
            card.memory_mib,
            card.healthy,
            card.disabled,
            card.disabled_reason,
            core,
            memory,
            n,
            CARD_INSTANCE_CAP[Scenario.INFERENCE if inference else Scenario.DEVELOPMENT],
            card.memory_used_mib,
            card.isolation_suspect,
            card.temperature_celsius,
            card.power_milliwatts,
        )
        node = nodes[card.node_id]
        node.cards.append(view)
        node.sessions += view.instances
        if inference:
            node.cap = NODE_INSTANCE_CAP[Scenario.INFERENCE]
    return list(nodes.values())


@dataclass(frozen=True)
class ClusterSummary:
    """The cluster page's counts: each node counted once, as drained, else not ready for its device
    profile, else not answering (its agent unreachable); a card takes no new session when it is
    unhealthy, marked so, or on such a node."""

    nodes: int
    drained: int
    unready: int
    unanswering: int
    cards: int
    cards_full: int
    cards_not_taking: int

    @property
    def every_node_takes_labs(self) -> bool:
        return not (self.drained or self.unready or self.unanswering)

    def to_json(self) -> dict:
        """The counts and their words in the active language, as the page shows them."""
        return {
            "nodes": self.nodes,
            "drained": self.drained,
            "unready": self.unready,
            "unanswering": self.unanswering,
            "cards": self.cards,
            "cards_full": self.cards_full,
            "cards_not_taking": self.cards_not_taking,
            "nodes_text": nodes_text(
                total=self.nodes, drained=self.drained, unready=self.unready, unanswering=self.unanswering
            ),
            "cards_text": cards_text(total=self.cards, full=self.cards_full, not_taking=self.cards_not_taking),
            "nothing_stranded": nothing_stranded_text(every_node_takes_labs=self.every_node_takes_labs),
        }


def cluster_summary(nodes: list[NodeView]) -> ClusterSummary:
    """The counts of :func:`cluster_state`'s ``nodes``."""
    drained = [n for n in nodes if n.drained]
    unready = [n for n in nodes if not n.drained and n.unready_reason]
    unanswering = [n for n in nodes if not n.drained and not n.unready_reason and not n.available]
    idle = {n.pk for n in (*drained, *unready, *unanswering)}
    return ClusterSummary(
        len(nodes),
        len(drained),
        len(unready),
        len(unanswering),
        sum(len(n.cards) for n in nodes),
        sum(1 for n in nodes for c in n.cards if c.full),
        sum(1 for n in nodes for c in n.cards if n.pk in idle or not c.usable),
    )


def cluster_state_json(nodes: list[NodeView]) -> dict:
    return {
        "summary": cluster_summary(nodes).to_json(),
        "nodes": [
            {
                "name": n.name,
                "available": n.available,
                "drained": n.drained,
                "unready_reason": n.unready_reason,
                "sessions": n.sessions,
                "evacuation": n.evacuation_text,
                "empty": n.evacuate_at is not None and n.empty,
                "cards": [
                    {
                        "id": c.pk,
                        "index": c.index,
                        "core_percent": c.core_percent,
                        "memory_reserved_mib": c.memory_reserved_mib,
                        "memory_mib": c.memory_mib,
                        "instances": c.instances,
                        "cap": c.cap,
                        "level": c.level,
                        "usable": c.usable,
                        "full": c.full,
                        "memory_used_mib": c.memory_used_mib,
                        "temperature_celsius": c.temperature_celsius,
                        "power_watts": c.power_watts,
                    }
                    for c in n.cards
                ],
            }
            for n in nodes
        ]
    }


def fragmentation():
    """Capacity stranded on cards that can take nothing more (the engine's own report)."""
    return Cluster(capacity_snapshot(), placement_config()).fragmentation()


@dataclass
class InstanceView:
    session: LabSession | None  # None: another institution's, not shown by name
    institution: str
    core_percent: int
    memory_mib: int
    scenario: str
    since: datetime
    borrowed: bool
    delivered_percent: int | None  # the agent's last reading of its AI Core, where it reports one
    memory_used_mib: int | None = None  # the agent's last reading of its device memory in use


def card_instances(*, card: Card, scope: OperatorScope) -> list[InstanceView]:
    allocations = list(
        Allocation.objects.filter(card=card, released_at__isnull=True)
        .select_related("session__student", "session__template", "course__institution")
        .order_by("created_at")
    )
    entity_ids = [a.entity_id or a.session.driver_ref for a in allocations]
    latest: dict[str, tuple[int, int | None]] = {}
    for entity_id, delivered, memory in (
        InstanceSample.objects.filter(node_id=card.node_id, entity_id__in=[e for e in entity_ids if e])
        .order_by("entity_id", "-taken_at")
        .values_list("entity_id", "delivered_percent", "memory_used_mib")
    ):
        latest.setdefault(entity_id, (delivered, memory))
    return [
        InstanceView(
            a.session if scope.sees_institution(a.course.institution_id) else None,
            a.course.institution.name,
            a.core_percent,
            a.memory_mib,
            a.scenario,
            a.created_at,
            a.borrowed,
            *latest.get(entity_id, (None, None)),
        )
        for a, entity_id in zip(allocations, entity_ids, strict=True)
    ]


# --- repairs and audit -------------------------------------------------------------------------


def repairs(*, scope: OperatorScope, kind: str = "", node: str = "") -> QuerySet[RepairEvent]:
    """Repair events, newest first; an institution's operator sees node-wide ones and their own sessions'."""
    events = RepairEvent.objects.select_related("node", "session__course").order_by("-created_at", "-id")
    if not scope.platform:
        events = events.filter(Q(session__isnull=True) | Q(session__course__institution_id__in=scope.institutions))
    if kind:
        events = events.filter(kind=kind)
    if node:
        events = events.filter(node__name=node)
    return events


def audit_events(
    *, scope: OperatorScope, action: str = "", actor: str = "", institution: int | None = None
) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.select_related("institution").order_by("-created_at", "-id")
    if not scope.platform:
        events = events.filter(institution_id__in=scope.institutions)
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor_name__icontains=actor)
    if institution:
        events = events.filter(institution_id=institution)
    return events


def institutions_for(*, scope: OperatorScope) -> QuerySet[Institution]:
    qs = Institution.objects.order_by("name")
    return qs if scope.platform else qs.filter(pk__in=scope.institutions)


def session_for_operator(*, scope: OperatorScope, session_id) -> LabSession | None:
    session = (
        LabSession.objects.select_related("course__institution", "student")
        .filter(pk=session_id)
        .exclude(state__in=TERMINAL)
        .first()
    )
    if session is None or not scope.sees_institution(session.course.institution_id):
        return None
    return session
