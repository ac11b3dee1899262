"""The working state of one pass: cards, nodes and placements as ``Cluster`` keeps them
(mutable, slotted, trusted), and the shape a request is placed by."""

from __future__ import annotations

from typing import NamedTuple

from labs.domain.placement.model import CardCapacity, Instance, LaunchRequest, NodeCapacity, instance_charge
from labs.domain.quota import Resources
from labs.domain.units import CARD_INSTANCE_CAP, CORE_PERCENT_MAX, NODE_INSTANCE_CAP, Scenario

_DEV_CARD_CAP = CARD_INSTANCE_CAP[Scenario.DEVELOPMENT]
_INF_CARD_CAP = CARD_INSTANCE_CAP[Scenario.INFERENCE]
_DEV_NODE_CAP = NODE_INSTANCE_CAP[Scenario.DEVELOPMENT]
_INF_NODE_CAP = NODE_INSTANCE_CAP[Scenario.INFERENCE]


Shape = tuple[int, int, bool, int, int, int]  # core per card, memory per card, inference, cards, host CPU, host memory


class Choice(NamedTuple):
    node: _Node
    cards: tuple[_Card, ...]
    shape: Shape


class _Card:
    __slots__ = (
        "card_id",
        "node",
        "index",
        "die_id",
        "chip_type",
        "memory_mib",
        "healthy",
        "unlisted",
        "core_used",
        "memory_used",
        "count",
        "inference",
        "score",
    )

    def __init__(self, card: CardCapacity, node: _Node) -> None:
        self.card_id = card.card_id
        self.node = node
        self.index = card.index
        self.die_id = card.die_id
        self.chip_type = card.chip_type
        self.memory_mib = card.memory_mib
        self.healthy = card.healthy
        self.unlisted = card.unlisted_mib
        self.core_used = 0
        self.memory_used = card.unlisted_mib
        self.count = 0
        self.inference = 0
        self.score = 0  # Cluster.card_score, kept current by Cluster._rescore

    def takes_whole(self, memory: int) -> bool:
        """Whether a whole-card instance needing ``memory`` MiB per card can have this card: healthy and empty."""
        return self.healthy and self.count == 0 and not self.memory_used and self.memory_mib >= memory

    def fits(self, core: int, memory: int, inference: bool) -> bool:
        return (
            self.healthy
            and self.core_used + core <= CORE_PERCENT_MAX
            and self.memory_used + memory <= self.memory_mib
            and self.count < (_INF_CARD_CAP if inference or self.inference else _DEV_CARD_CAP)
        )


class _Node:
    __slots__ = (
        "name",
        "order",
        "available",
        "maintenance",
        "labels",
        "granule",
        "cards",
        "count",
        "inference",
        "core_used",
        "memory_used",
        "memory_total",
        "summary",
        "healthy_cards",
        "cpu_total",
        "cpu_used",
        "host_mib_total",
        "host_mib_used",
    )

    def __init__(self, node: NodeCapacity, order: int) -> None:
        self.name = node.name
        self.order = order
        self.available = node.available
        self.maintenance = node.maintenance
        self.labels = dict(node.labels)
        self.granule = node.memory_granule_mib
        self.cards = [_Card(c, self) for c in sorted(node.cards, key=lambda c: c.index)]
        self.count = 0
        self.inference = 0
        self.core_used = 0
        self.memory_used = sum(c.unlisted for c in self.cards)
        self.memory_total = sum(c.memory_mib for c in self.cards) or 1
        self.healthy_cards = sum(1 for c in self.cards if c.healthy)  # health is fixed for a pass
        self.cpu_total = node.cpu_millicores  # None: not reported, not limited
        self.cpu_used = 0
        self.host_mib_total = node.host_memory_mib
        self.host_mib_used = 0
        # For explanations: per scenario cap (16, 8), the card with the most free core and the
        # one with the most free memory among healthy cards below that cap (first of equals).
        self.summary: dict[int, tuple[_Card | None, _Card | None]] | None = None

    def summarise(self) -> None:
        summary = {}
        for cap in (_DEV_CARD_CAP, _INF_CARD_CAP):
            # A card may be over full while a pass counts planned reclaims on top of their victims.
            most_core = most_mib = -(2**62)
            core_card = mib_card = None
            for card in self.cards:
                if not card.healthy or card.count >= (_INF_CARD_CAP if card.inference else cap):
                    continue
                free_core = CORE_PERCENT_MAX - card.core_used
                free_mib = card.memory_mib - card.memory_used
                if free_core > most_core:
                    most_core, core_card = free_core, card
                if free_mib > most_mib:
                    most_mib, mib_card = free_mib, card
            summary[cap] = (core_card, mib_card)
        self.summary = summary

    def cap(self, inference: bool) -> int:
        """The node's instance cap once an instance of ``inference`` scenario joins it."""
        return _INF_NODE_CAP if inference or self.inference else _DEV_NODE_CAP

    def has_room(self, inference: bool, instances: int = 1) -> bool:
        """Whether ``instances`` more (one per card of a whole-card request) stay within the cap."""
        return self.count + instances <= (_INF_NODE_CAP if inference or self.inference else _DEV_NODE_CAP)

    def host_fits(self, cpu: int, memory: int) -> bool:
        """Whether ``cpu`` millicores and ``memory`` MiB more stay within the node's allocatable host."""
        return (self.cpu_total is None or self.cpu_used + cpu <= self.cpu_total) and (
            self.host_mib_total is None or self.host_mib_used + memory <= self.host_mib_total
        )


class _Placement(NamedTuple):
    """One placed instance: per-card amounts, who holds it, and its card(s)."""

    key: str
    core_percent: int  # on each card: 100 for whole cards
    memory_mib: int  # on each card; for whole cards each card's own memory counts (``charge``)
    scenario: Scenario
    course_id: int | None
    student_id: int | None
    started_at: float
    cards: tuple[_Card, ...]
    whole: bool  # whole cards: all of each card's core and memory
    cpu_millicores: int = 0  # host, on the node, once
    host_memory_mib: int = 0

    def instance_on(self, card: _Card) -> Instance:
        if self.whole:
            return Instance(
                CORE_PERCENT_MAX,
                card.memory_mib,
                self.scenario,
                self.key,
                self.course_id,
                self.started_at,
                self.student_id,
                len(self.cards),
                self.cpu_millicores,
                self.host_memory_mib,
            )
        return Instance(
            self.core_percent,
            self.memory_mib,
            self.scenario,
            self.key,
            self.course_id,
            self.started_at,
            self.student_id,
            1,
            self.cpu_millicores,
            self.host_memory_mib,
        )

    def charge(self) -> Resources:
        return instance_charge(self.core_percent, self.memory_mib, tuple(c.memory_mib for c in self.cards) if self.whole else ())


def _shape(request: LaunchRequest) -> Shape:
    cards = max(1, request.cards)
    inference = request.scenario == Scenario.INFERENCE
    if cards > 1:
        return (CORE_PERCENT_MAX, request.memory_mib, inference, cards, request.cpu_millicores, request.host_memory_mib)
    return (request.core_percent, request.memory_mib, inference, 1, request.cpu_millicores, request.host_memory_mib)


def _matches(node: _Node, selector: tuple[tuple[str, str], ...]) -> bool:
    return all(node.labels.get(k) == v for k, v in selector)
