"""Placement of FlexNPU instances on cards: the capacity model, policies, scores, explanations.

``Cluster`` is the working state of one allocation pass (or of a benchmark stream): built from a
capacity snapshot, it chooses a card for a request, records placements and releases, explains
a miss (a ``Reason``), reports fragmentation and plans reclaims. Nothing here reads a clock or
any I/O; the caller passes times in.

Invariants ``commit`` never breaks (DESIGN §1, §3): per card Σ core floors ≤ 100, Σ memory ≤
usable memory, instances ≤ the tightest scenario cap present (16 development, 8 inference);
per node ≤ 128 instances, or 64 once an inference instance is there. Unhealthy cards and
unavailable nodes are never chosen. A request of ``cards`` > 1 takes that many whole, empty
cards on one node (core 100 each) and counts as one instance on each of them.

Host resources are counted per node like the cards' (issue 14): a node that reports its
allocatable CPU (``cpu_millicores``) and host memory (``host_memory_mib``, both after the
system's reserve) never holds instances whose requests add up to more; a node that reports
neither (``None``, an old agent) is not limited.

Policies, chosen separately for nodes and cards (as Volcano's ``flexnpuaffinity`` and HAMi's
node/device policies): ``binpack`` puts the instance where utilisation is highest, ``spread``
where it is lowest. Utilisation is HAMi's weighted sum of instance count, core and memory
ratios, in integers. Binpack always prefers a partly used card (one holding any instance, a
best-effort one included) over an empty card, whatever the weights; under binpack at both
levels a node where the request fits on a partly used card ranks above any node where it would
open an empty card. Ties go to the lower node order, then the lower card index.

Two ways to find the node, with the same answer (tests compare them): a scan of every node
(small clusters, label selectors, pinned cards, and the reference in ``bench/``) and, for large
clusters, an index per request shape — a sorted list of the nodes the shape fits on, kept up to
date as placements and releases change a node.

The records coming in (``NodeCapacity``, ``CardCapacity``, ``Instance``, ``LaunchRequest``,
``PlacementConfig``) check their fields when made and raise ``TypeError``/``ValueError`` naming
the field; the engine trusts them afterwards.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from sortedcontainers import SortedList

from labs.domain.checks import (
    as_enum,
    check_bool,
    check_int,
    check_number,
    check_optional_int,
    check_str,
    check_type,
)
from labs.domain.quota import Resources
from labs.domain.reasons import Reason
from labs.domain.units import (
    CARD_INSTANCE_CAP,
    CORE_PERCENT_MAX,
    MEMORY_GRANULE_MIB,
    NODE_INSTANCE_CAP,
    Scenario,
)

_DEV_CARD_CAP = CARD_INSTANCE_CAP[Scenario.DEVELOPMENT]
_INF_CARD_CAP = CARD_INSTANCE_CAP[Scenario.INFERENCE]
_DEV_NODE_CAP = NODE_INSTANCE_CAP[Scenario.DEVELOPMENT]
_INF_NODE_CAP = NODE_INSTANCE_CAP[Scenario.INFERENCE]


class Policy(StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"


class SharePolicy(StrEnum):
    """How an instance shares compute (openFuyao's names); only best-effort has no floor."""

    FIXED_SHARE = "fixed-share"
    ELASTIC = "elastic"
    BEST_EFFORT = "best-effort"


def instance_charge(core_percent: int, memory_mib: int, whole_card_memory_mib: Sequence[int] = ()) -> Resources:
    """The one charge rule: what an instance counts against its course's quota.

    An instance on part of one card charges its core floor (percent) and memory cap (MiB). An
    instance on whole cards (``whole_card_memory_mib``: the memory of each of its cards, two or
    more) charges 100 % and all the memory of every card, whatever it asked for, since nothing
    else can use the rest. Either way it is one instance. Used for the charge at admission, the
    refund at release, a course's usage from a snapshot and the borrowed/guaranteed split.
    """
    if whole_card_memory_mib:
        return Resources(CORE_PERCENT_MAX * len(whole_card_memory_mib), sum(whole_card_memory_mib), 1)
    return Resources(core_percent, memory_mib, 1)


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """Weights (non-negative ints) of instance-count, core and memory utilisation in a score."""

    instances: int = 1
    core: int = 1
    memory: int = 1

    def __post_init__(self) -> None:
        for name in ("instances", "core", "memory"):
            check_int("ScoreWeights", name, getattr(self, name), 0)


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    node_policy: Policy = Policy.BINPACK
    card_policy: Policy = Policy.BINPACK
    weights: ScoreWeights = ScoreWeights()
    # A borrowed session younger than this (seconds) is never chosen for reclaim.
    min_runtime_seconds: float = 600.0
    # Clusters with more nodes than this use the per-shape index instead of a scan.
    index_min_nodes: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_policy", as_enum("PlacementConfig", "node_policy", self.node_policy, Policy))
        object.__setattr__(self, "card_policy", as_enum("PlacementConfig", "card_policy", self.card_policy, Policy))
        check_type("PlacementConfig", "weights", self.weights, ScoreWeights)
        check_number("PlacementConfig", "min_runtime_seconds", self.min_runtime_seconds)
        check_int("PlacementConfig", "index_min_nodes", self.index_min_nodes, 0)


DEFAULT_CONFIG = PlacementConfig()


@dataclass(frozen=True, slots=True)
class Instance:
    """An instance on a card. ``key`` names it (session id or FlexNPU entity-id).

    ``core_percent`` (0..100; 0 for best-effort) and ``memory_mib`` are what it holds on this
    card. An instance on whole cards (``cards`` > 1) appears on each of its cards, all on one
    node, with the same key, ``core_percent`` 100 and the card's memory; it needs a key so that
    its cards can be put back together. ``started_at`` is in seconds (the caller's clock);
    ``student_id`` lets a release give the student's session slot back.
    """

    core_percent: int
    memory_mib: int
    scenario: Scenario
    key: str = ""
    course_id: int | None = None
    started_at: float = 0.0
    student_id: int | None = None
    cards: int = 1
    # Host CPU (millicores) and memory (MiB) the instance's pod requests, once per instance:
    # a whole-card instance carries the same figures on each of its cards.
    cpu_millicores: int = 0
    host_memory_mib: int = 0

    def __post_init__(self) -> None:
        check_int("Instance", "core_percent", self.core_percent, 0, CORE_PERCENT_MAX)
        check_int("Instance", "cpu_millicores", self.cpu_millicores, 0)
        check_int("Instance", "host_memory_mib", self.host_memory_mib, 0)
        check_int("Instance", "memory_mib", self.memory_mib, 0)
        object.__setattr__(self, "scenario", as_enum("Instance", "scenario", self.scenario, Scenario))
        check_str("Instance", "key", self.key)
        check_optional_int("Instance", "course_id", self.course_id)
        check_number("Instance", "started_at", self.started_at, float("-inf"))
        check_optional_int("Instance", "student_id", self.student_id)
        check_int("Instance", "cards", self.cards, 1)
        if self.cards > 1:
            if self.core_percent != CORE_PERCENT_MAX:
                raise ValueError(
                    f"Instance.core_percent must be 100 on each card of a whole-card instance, not {self.core_percent}"
                )
            if not self.key:
                raise ValueError("Instance.key must name a whole-card instance (its cards are matched by key)")


@dataclass(frozen=True, slots=True)
class CardCapacity:
    card_id: int
    index: int
    memory_mib: int
    healthy: bool = True
    instances: tuple[Instance, ...] = ()
    die_id: str = ""
    chip_type: str = ""
    # Memory in use on the card that the ledger does not list there, as its node's agent
    # measured it. Only on nodes whose device plugin picks the card unseen: the ledger's card
    # is a packing there, and a card holding more than the packing says must not be offered
    # the difference. Counts as used memory; no instance, no AI Core.
    unlisted_mib: int = 0

    def __post_init__(self) -> None:
        check_int("CardCapacity", "card_id", self.card_id)
        check_int("CardCapacity", "index", self.index, 0)
        check_int("CardCapacity", "memory_mib", self.memory_mib, 0)
        check_bool("CardCapacity", "healthy", self.healthy)
        if not isinstance(self.instances, tuple | list):
            raise TypeError(f"CardCapacity.instances must be a tuple of Instance, not {self.instances!r}")
        object.__setattr__(self, "instances", tuple(self.instances))
        for instance in self.instances:
            if not isinstance(instance, Instance):
                raise TypeError(f"CardCapacity.instances must hold Instance records, not {instance!r}")
        check_str("CardCapacity", "die_id", self.die_id)
        check_str("CardCapacity", "chip_type", self.chip_type)
        check_int("CardCapacity", "unlisted_mib", self.unlisted_mib, 0)
        if self.unlisted_mib > self.memory_mib:
            raise ValueError(
                f"CardCapacity.unlisted_mib ({self.unlisted_mib}) cannot exceed the card's memory_mib ({self.memory_mib})"
            )


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    name: str
    cards: tuple[CardCapacity, ...]
    available: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    # The device profile's memory step: 128 MiB for FlexNPU, 1024 MiB for openFuyao vNPU.
    memory_granule_mib: int = MEMORY_GRANULE_MIB
    # Allocatable host CPU (millicores) and memory (MiB) after the system's reserve; ``None``:
    # not reported, not limited.
    cpu_millicores: int | None = None
    host_memory_mib: int | None = None

    def __post_init__(self) -> None:
        check_str("NodeCapacity", "name", self.name, empty=False)
        if self.cpu_millicores is not None:
            check_int("NodeCapacity", "cpu_millicores", self.cpu_millicores, 0)
        if self.host_memory_mib is not None:
            check_int("NodeCapacity", "host_memory_mib", self.host_memory_mib, 0)
        if not isinstance(self.cards, tuple | list):
            raise TypeError(f"NodeCapacity.cards must be a tuple of CardCapacity, not {self.cards!r}")
        object.__setattr__(self, "cards", tuple(self.cards))
        indices = set()
        for card in self.cards:
            if not isinstance(card, CardCapacity):
                raise TypeError(f"NodeCapacity.cards must hold CardCapacity records, not {card!r}")
            if card.index in indices:
                raise ValueError(f"NodeCapacity {self.name}: card index {card.index} appears twice")
            indices.add(card.index)
        check_bool("NodeCapacity", "available", self.available)
        if not isinstance(self.labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.labels.items()
        ):
            raise TypeError(f"NodeCapacity.labels must map str to str, not {self.labels!r}")
        check_int("NodeCapacity", "memory_granule_mib", self.memory_granule_mib, 1)
        if self.memory_granule_mib % MEMORY_GRANULE_MIB:
            step = self.memory_granule_mib
            raise ValueError(f"NodeCapacity.memory_granule_mib must be a positive multiple of {MEMORY_GRANULE_MIB}, not {step}")


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One instance to place. ``cards`` > 1 asks for whole cards (core_percent = 100 x cards).

    Fields are checked when the request is made (types, known policy and scenario names, no
    negative amounts, ``cards`` >= 1). Whether the amounts can ever be placed — core 1..100 (0
    for best-effort), memory a positive multiple of 128 MiB and of some node's step, within the
    course's ceiling — is the allocator's to decide, with a ``Refused`` and its reason.
    """

    key: str
    course_id: int
    student_id: int
    core_percent: int
    memory_mib: int
    scenario: Scenario = Scenario.DEVELOPMENT
    cards: int = 1
    share_policy: SharePolicy = SharePolicy.ELASTIC
    node_selector: tuple[tuple[str, str], ...] = ()
    die_id: str = ""
    node_policy: Policy | None = None
    card_policy: Policy | None = None
    template_id: int | None = None
    # Pre-started for a class reservation and not yet anyone's: no student's session limit applies
    # (the reservation's count bounds them).
    pooled: bool = False
    # Host CPU (millicores) and memory (MiB) the pod requests on its node.
    cpu_millicores: int = 0
    host_memory_mib: int = 0

    def __post_init__(self) -> None:
        check_str("LaunchRequest", "key", self.key, empty=False)
        check_int("LaunchRequest", "cpu_millicores", self.cpu_millicores, 0)
        check_int("LaunchRequest", "host_memory_mib", self.host_memory_mib, 0)
        check_int("LaunchRequest", "course_id", self.course_id)
        check_int("LaunchRequest", "student_id", self.student_id)
        check_int("LaunchRequest", "core_percent", self.core_percent, 0)
        check_int("LaunchRequest", "memory_mib", self.memory_mib, 0)
        check_int("LaunchRequest", "cards", self.cards, 1)
        setattr_ = object.__setattr__
        setattr_(self, "scenario", as_enum("LaunchRequest", "scenario", self.scenario, Scenario))
        setattr_(self, "share_policy", as_enum("LaunchRequest", "share_policy", self.share_policy, SharePolicy))
        if self.node_policy is not None:
            setattr_(self, "node_policy", as_enum("LaunchRequest", "node_policy", self.node_policy, Policy))
        if self.card_policy is not None:
            setattr_(self, "card_policy", as_enum("LaunchRequest", "card_policy", self.card_policy, Policy))
        if not isinstance(self.node_selector, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(part, str) for part in pair)
            for pair in self.node_selector
        ):
            selector = self.node_selector
            raise TypeError(f"LaunchRequest.node_selector must be a tuple of (label, value) str pairs, not {selector!r}")
        check_str("LaunchRequest", "die_id", self.die_id)
        check_optional_int("LaunchRequest", "template_id", self.template_id)
        check_bool("LaunchRequest", "pooled", self.pooled)


Shape = tuple[int, int, bool, int, int, int]  # core per card, memory per card, inference, cards, host CPU, host memory


class Choice(NamedTuple):
    node: _Node
    cards: tuple[_Card, ...]
    shape: Shape


class StrandedCard(NamedTuple):
    node: str
    card_index: int
    free_core_percent: int
    free_memory_mib: int
    why: Reason


@dataclass(frozen=True)
class FragmentationReport:
    """Capacity on cards that can take no more instances: free, but usable by nobody."""

    stranded_core_percent: int
    stranded_memory_mib: int
    cards: tuple[StrandedCard, ...]


@dataclass(frozen=True)
class ReclaimPlan:
    """Borrowed sessions of other courses whose removal makes room, newest first.

    The room is on one card (``card_index``) or, for a whole-card request, on whole cards of one
    node (``card_indices``; ``card_index`` is the first of them).
    """

    victims: tuple[str, ...]
    node: str
    card_index: int
    card_indices: tuple[int, ...] = ()


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


class Holding(NamedTuple):
    """What a released instance held: its course and student (``None`` when unknown) and its charge."""

    course_id: int | None
    student_id: int | None
    started_at: float
    charge: Resources


def largest_limit(limits: Iterable[int | None]) -> int | None:
    """The largest of the nodes' host limits; ``None`` when there is no node or some node reports
    none (it is not limited, so nothing is too large for it)."""
    values = list(limits)
    return None if not values or None in values else max(values)


class Cluster:
    """The mutable capacity state of one pass. See the module docstring."""

    def __init__(self, nodes: Iterable[NodeCapacity], config: PlacementConfig = DEFAULT_CONFIG) -> None:
        sources = list(nodes)
        self.config = config
        self.nodes = [_Node(n, order) for order, n in enumerate(sources)]
        self._placements: dict[str, _Placement] = {}
        self._indexes: dict[tuple[Shape, Policy, Policy], _ShapeIndex] = {}
        self._use_index = len(self.nodes) > config.index_min_nodes
        self._single = self.nodes[0] if len(self.nodes) == 1 else None
        # Changes with every placement and release; keys the explanation cache.
        self._version = 0
        self._explained: dict[tuple, tuple[int, Reason]] = {}
        self._by_course: dict[int, set[str]] = {}
        self._single_granule = len({n.granule for n in self.nodes}) <= 1
        # Availability and health are fixed for the life of a Cluster (one pass).
        self._healthy_available = any(n.available and n.healthy_cards for n in self.nodes)
        self._explain_lists: dict[bool, tuple] | None = None  # built on the first miss
        self.largest_card_mib = max((c.memory_mib for n in self.nodes for c in n.cards), default=0)
        self.most_cards_per_node = max((len(n.cards) for n in self.nodes), default=0)
        self.granules = frozenset(n.granule for n in self.nodes)
        self._whole_card_mib: dict[int, int] = {}
        # The most host CPU / memory any node offers lab sessions; ``None`` when some node is unlimited.
        self.largest_cpu_millicores = largest_limit(n.cpu_total for n in self.nodes)
        self.largest_host_mib = largest_limit(n.host_mib_total for n in self.nodes)
        # Nodes that limit host CPU or memory: explanations then take the scan, which counts them.
        self._host_limited = any(n.cpu_total is not None or n.host_mib_total is not None for n in self.nodes)
        for source, node in zip(sources, self.nodes, strict=True):
            self._load(node, source)

    def _load(self, node: _Node, source: NodeCapacity) -> None:
        """Record the instances a snapshot has on ``node``; ``ValueError`` if one cannot be placed back.

        A whole-card instance is listed on each of its cards with the same key: those entries
        become one placement again, so a snapshot round trip is exact and a release frees every
        card. A key may name one instance only, in the whole snapshot.
        """
        whole: dict[str, list[tuple[_Card, Instance]]] = {}
        for card_source, card in zip(sorted(source.cards, key=lambda c: c.index), node.cards, strict=True):
            for instance in card_source.instances:
                if instance.cards > 1:
                    whole.setdefault(instance.key, []).append((card, instance))
                    continue
                key = instance.key
                if not key:  # a residual the snapshot cannot name still takes its capacity
                    key = f"~{len(self._placements)}"
                    while key in self._placements:
                        key += "~"
                self._add(
                    _Placement(
                        key,
                        instance.core_percent,
                        instance.memory_mib,
                        instance.scenario,
                        instance.course_id,
                        instance.student_id,
                        instance.started_at,
                        (card,),
                        False,
                        instance.cpu_millicores,
                        instance.host_memory_mib,
                    ),
                    f"node {node.name}, card {card.index}",
                )
        for key, entries in whole.items():
            first = entries[0][1]
            same = all(
                (i.scenario, i.course_id, i.student_id, i.started_at, i.cards)
                == (first.scenario, first.course_id, first.student_id, first.started_at, first.cards)
                for _, i in entries
            )
            if not same or len(entries) != first.cards or len({id(card) for card, _ in entries}) != first.cards:
                raise ValueError(
                    f"snapshot: whole-card instance {key!r} on node {node.name} must appear once on each of its "
                    f"{first.cards} cards with the same fields; found {len(entries)} entries"
                )
            cards = tuple(card for card, _ in entries)
            placement = _Placement(
                key,
                CORE_PERCENT_MAX,
                cards[0].memory_mib,
                first.scenario,
                first.course_id,
                first.student_id,
                first.started_at,
                cards,
                True,
                first.cpu_millicores,
                first.host_memory_mib,
            )
            self._add(placement, f"node {node.name}")

    def _add(self, placement: _Placement, where: str) -> None:
        if placement.key in self._placements:
            raise ValueError(f"snapshot: instance key {placement.key!r} appears twice (again on {where})")
        self._apply(placement, +1)
        self._placements[placement.key] = placement
        if placement.course_id is not None:
            self._by_course.setdefault(placement.course_id, set()).add(placement.key)

    # --- scores -------------------------------------------------------------------------------

    def card_score(self, card: _Card) -> int:
        w = self.config.weights
        cap = _INF_CARD_CAP if card.inference else _DEV_CARD_CAP
        return (
            w.instances * card.count * 10_000 // cap
            + w.core * card.core_used * 100
            + w.memory * card.memory_used * 10_000 // (card.memory_mib or 1)
        )

    def node_score(self, node: _Node) -> int:
        w = self.config.weights
        cards = len(node.cards) or 1
        cap = (_INF_CARD_CAP if node.inference else _DEV_CARD_CAP) * cards
        return (
            w.instances * node.count * 10_000 // cap
            + w.core * node.core_used * 100 // cards
            + w.memory * node.memory_used * 10_000 // node.memory_total
        )

    # --- choosing -----------------------------------------------------------------------------

    def choose(self, request: LaunchRequest) -> Choice | None:
        """The node and card(s) the policies pick for ``request``, or ``None``; changes nothing."""
        node_policy = request.node_policy or self.config.node_policy
        card_policy = request.card_policy or self.config.card_policy
        shape = _shape(request)
        if self._single is not None and not request.node_selector:
            # One server (the embedded default): no node to compare, so no node score to compute.
            only = self._single
            if (
                not only.available
                or shape[1] % only.granule
                or not only.has_room(shape[2], shape[3])
                or not only.host_fits(shape[4], shape[5])
            ):
                return None
            return self._choose_cards(only, request, card_policy, shape)
        if self._use_index and not request.node_selector and not request.die_id:
            index = self._index_for(shape, node_policy, card_policy)
            node = index.best()
            return None if node is None else self._choose_cards(node, request, card_policy, shape)
        return self.choose_by_scan(request, node_policy, card_policy, shape)

    def choose_by_scan(
        self,
        request: LaunchRequest,
        node_policy: Policy | None = None,
        card_policy: Policy | None = None,
        shape: Shape | None = None,
    ) -> Choice | None:
        """The reference: look at every node. Same answer as the index, slower."""
        node_policy = node_policy or request.node_policy or self.config.node_policy
        card_policy = card_policy or request.card_policy or self.config.card_policy
        shape = shape or _shape(request)
        best_key = None
        best_node = None
        for node in self.nodes:
            if request.node_selector and not _matches(node, request.node_selector):
                continue
            key = self._node_key(node, shape, node_policy, card_policy, request.die_id)
            if key is not None and (best_key is None or key < best_key):
                best_key, best_node = key, node
        return None if best_node is None else self._choose_cards(best_node, request, card_policy, shape)

    def _node_key(
        self, node: _Node, shape: Shape, node_policy: Policy, card_policy: Policy, die_id: str = "", score: int | None = None
    ) -> tuple | None:
        """Sort key of ``node`` for ``shape`` (smaller is better), or ``None`` when it does not fit.

        Runs once per index for every node a placement or release changes: ``_Card.fits`` is
        written out inline, and ``score`` may be passed in when the caller already has it.
        """
        core, memory, inference, cards, cpu, host_mib = shape
        if not node.available or memory % node.granule or not node.has_room(inference, cards):
            return None
        if not node.host_fits(cpu, host_mib):
            return None
        partly_used = False
        if cards > 1:
            if sum(1 for c in node.cards if c.takes_whole(memory)) < cards:
                return None
        else:
            fits = False
            core_limit = CORE_PERCENT_MAX - core
            for card in node.cards:
                if (
                    card.healthy
                    and card.core_used <= core_limit
                    and card.memory_used + memory <= card.memory_mib
                    and card.count < (_INF_CARD_CAP if inference or card.inference else _DEV_CARD_CAP)
                    and (not die_id or card.die_id == die_id)
                ):
                    fits = True
                    if card.count:
                        partly_used = True
                        break
            if not fits:
                return None
        if score is None:
            score = self.node_score(node)
        if node_policy == Policy.BINPACK:
            tier = 0 if partly_used or card_policy != Policy.BINPACK else 1
            return (tier, -score, node.order)
        return (score, node.order)

    def _choose_cards(self, node: _Node, request: LaunchRequest, card_policy: Policy, shape: Shape) -> Choice | None:
        core, memory, inference, cards = shape[:4]
        if cards > 1:
            free = [c for c in node.cards if c.takes_whole(memory)]
            return Choice(node, tuple(free[:cards]), shape) if len(free) >= cards else None
        # The hot loop of every placement: ``_Card.fits`` written out inline.
        die_id = request.die_id
        sign = -1 if card_policy == Policy.BINPACK else 1
        best = None
        best_key = 0
        for card in node.cards:  # in index order, so the first of equal keys has the lower index
            if not card.healthy or (die_id and card.die_id != die_id):
                continue
            if card.core_used + core > CORE_PERCENT_MAX or card.memory_used + memory > card.memory_mib:
                continue
            card_inference = card.inference
            if card.count >= (_INF_CARD_CAP if inference or card_inference else _DEV_CARD_CAP):
                continue
            # Binpack ranks an empty card (score 0 whatever the weights) after every partly used
            # one, even one whose score is 0 with zero weights or only best-effort instances.
            key = sign * card.score if card.count or sign > 0 else 1
            if best is None or key < best_key:
                best, best_key = card, key
        return None if best is None else Choice(node, (best,), shape)

    def _index_for(self, shape: Shape, node_policy: Policy, card_policy: Policy) -> _ShapeIndex:
        key = (shape, node_policy, card_policy)
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = _ShapeIndex(self, shape, node_policy, card_policy)
        return index

    # --- changing -----------------------------------------------------------------------------

    def commit(self, request: LaunchRequest, choice: Choice, *, started_at: float = 0.0) -> None:
        """Record ``request`` on the chosen card(s); ``started_at`` is in seconds.

        ``choice`` must come from ``choose`` for this request with nothing committed in between.
        ``ValueError`` if an instance is already placed under ``request.key``: one key, one instance.
        """
        key = request.key
        if key in self._placements:
            raise ValueError(f"request key {key!r} is already placed; a key names one instance")
        core, memory, inference, cards, cpu, host_mib = choice.shape
        if cards == 1:  # the common case, spelled out: this runs for every placement
            card = choice.cards[0]
            node = choice.node
            placement = _Placement(
                key,
                core,
                memory,
                request.scenario,
                request.course_id,
                request.student_id,
                started_at,
                choice.cards,
                False,
                cpu,
                host_mib,
            )
            node.cpu_used += cpu
            node.host_mib_used += host_mib
            card.core_used += core
            card.memory_used += memory
            card.count += 1
            node.core_used += core
            node.memory_used += memory
            node.count += 1
            if inference:
                card.inference += 1
                node.inference += 1
            card.score = self.card_score(card)
        else:
            placement = _Placement(
                key,
                CORE_PERCENT_MAX,
                choice.cards[0].memory_mib,
                request.scenario,
                request.course_id,
                request.student_id,
                started_at,
                choice.cards,
                True,
                cpu,
                host_mib,
            )
            self._apply(placement, +1)
        self._placements[key] = placement
        self._version += 1
        if request.course_id is not None:
            self._by_course.setdefault(request.course_id, set()).add(key)
        choice.node.summary = None
        self._explain_refresh(choice.node)
        if self._indexes:
            self._refresh(choice.node)

    def release(self, key: str) -> Holding | None:
        """Remove the instance placed under ``key`` from every card it holds.

        Returns what it held (course, student, charge by ``instance_charge``), or ``None`` if
        there is no instance by that key.
        """
        placement = self.set_aside(key)
        if placement is None:
            return None
        return Holding(placement.course_id, placement.student_id, placement.started_at, placement.charge())

    def set_aside(self, key: str) -> _Placement | None:
        """Remove the instance placed under ``key`` and return it as it was, for ``put_back``
        (planning what the cluster will be once it has gone); ``None`` if there is none."""
        placement = self._placements.pop(key, None)
        if placement is None:
            return None
        if placement.course_id is not None:
            self._by_course.get(placement.course_id, set()).discard(key)
        self._apply(placement, -1)
        self._changed(placement.cards[0].node)
        return placement

    def put_back(self, placement: _Placement) -> None:
        """Place again an instance ``set_aside`` removed, where it was."""
        self._add(placement, "put back")
        self._changed(placement.cards[0].node)

    def _changed(self, node: _Node) -> None:
        self._version += 1
        node.summary = None
        self._explain_refresh(node)
        self._refresh(node)

    def _apply(self, placement: _Placement, sign: int) -> None:
        inference = placement.scenario == Scenario.INFERENCE
        host_node = placement.cards[0].node
        host_node.cpu_used += sign * placement.cpu_millicores
        host_node.host_mib_used += sign * placement.host_memory_mib
        for card in placement.cards:
            core = CORE_PERCENT_MAX if placement.whole else placement.core_percent
            memory = card.memory_mib if placement.whole else placement.memory_mib
            card.core_used += sign * core
            card.memory_used += sign * memory
            card.count += sign
            if inference:
                card.inference += sign
            card.score = self.card_score(card)
            node = card.node
            node.core_used += sign * core
            node.memory_used += sign * memory
            node.count += sign
            if inference:
                node.inference += sign

    def _refresh(self, node: _Node) -> None:
        # Indexes re-sort a changed node only when next asked: binpack changes one node many
        # times in a row, and a rarely launched shape should not pay for every placement.
        for index in self._indexes.values():
            index.dirty.add(node.order)

    # --- reading ------------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        """Whether an instance is placed under ``key``."""
        return key in self._placements

    def instance_of(self, key: str) -> tuple[Instance, int] | None:
        """The instance placed under ``key`` (as on its first card) and how many cards it holds."""
        placement = self._placements.get(key)
        return None if placement is None else (placement.instance_on(placement.cards[0]), len(placement.cards))

    def placement_of(self, key: str) -> tuple[Instance, tuple[tuple[str, int], ...]] | None:
        """The instance placed under ``key`` and its (node name, card index) pairs."""
        placement = self._placements.get(key)
        if placement is None:
            return None
        return placement.instance_on(placement.cards[0]), tuple((c.node.name, c.index) for c in placement.cards)

    def course_holdings(self, course_id: int) -> Iterable[tuple[str, Holding]]:
        """The key and holding of every instance of ``course_id``, in no particular order."""
        for key in self._by_course.get(course_id, ()):
            placement = self._placements[key]
            yield key, Holding(placement.course_id, placement.student_id, placement.started_at, placement.charge())

    def instances(self) -> Iterable[tuple[str, Instance, _Card]]:
        """Every placed instance with its (first) card."""
        for key, placement in self._placements.items():
            yield key, placement.instance_on(placement.cards[0]), placement.cards[0]

    def host_usage_by_course(self) -> dict[int, tuple[int, int]]:
        """Host CPU (millicores) and memory (MiB) each course's placed instances request."""
        usage: dict[int, tuple[int, int]] = {}
        for placement in self._placements.values():
            if placement.course_id is not None:
                cpu, mib = usage.get(placement.course_id, (0, 0))
                usage[placement.course_id] = (cpu + placement.cpu_millicores, mib + placement.host_memory_mib)
        return usage

    def usage_by_course(self) -> dict[int, tuple[int, int, int]]:
        """(core percent, memory MiB, instances) per course, each instance charged by ``instance_charge``."""
        usage: dict[int, tuple[int, int, int]] = {}
        for placement in self._placements.values():
            if placement.course_id is None:
                continue
            core, memory, count = usage.get(placement.course_id, (0, 0, 0))
            charge = placement.charge()
            usage[placement.course_id] = (core + charge.core_percent, memory + charge.memory_mib, count + charge.instances)
        return usage

    def whole_card_memory(self, memory_mib: int) -> int:
        """The memory (MiB) of the smallest healthy card of at least ``memory_mib``, or 0 if none.

        What each card of a whole-card request for ``memory_mib`` per card would be charged,
        known before the cards are chosen (exact when a cluster's cards are all alike).
        """
        known = self._whole_card_mib.get(memory_mib)
        if known is None:
            sizes = [c.memory_mib for n in self.nodes for c in n.cards if c.healthy and c.memory_mib >= memory_mib]
            known = self._whole_card_mib[memory_mib] = min(sizes, default=0)
        return known

    def snapshot(self) -> list[NodeCapacity]:
        """The current state as a capacity snapshot; ``Cluster(snapshot())`` is this state again.

        A whole-card instance appears on each of its cards, with the same key and ``cards``.
        """
        on_card: dict[int, list[Instance]] = {}
        for placement in self._placements.values():
            for card in placement.cards:
                on_card.setdefault(id(card), []).append(placement.instance_on(card))
        return [
            NodeCapacity(
                n.name,
                tuple(
                    CardCapacity(
                        c.card_id,
                        c.index,
                        c.memory_mib,
                        c.healthy,
                        tuple(on_card.get(id(c), ())),
                        c.die_id,
                        c.chip_type,
                        c.unlisted,
                    )
                    for c in n.cards
                ),
                n.available,
                dict(n.labels),
                n.granule,
                n.cpu_total,
                n.host_mib_total,
            )
            for n in self.nodes
        ]

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if any card or node is over a limit (used by tests and benches)."""
        for node in self.nodes:
            assert node.count <= (_INF_NODE_CAP if node.inference else _DEV_NODE_CAP), node.name
            assert node.host_fits(0, 0), (node.name, "host")
            for card in node.cards:
                assert card.core_used <= CORE_PERCENT_MAX, (node.name, card.index)
                assert card.memory_used <= card.memory_mib, (node.name, card.index)
                assert card.count <= (_INF_CARD_CAP if card.inference else _DEV_CARD_CAP), (node.name, card.index)

    def fragmentation(self) -> FragmentationReport:
        stranded = []
        for node in self.nodes:
            if not node.available:
                continue
            for card in node.cards:
                if not card.healthy:
                    continue
                free_core = CORE_PERCENT_MAX - card.core_used
                free_mib = card.memory_mib - card.memory_used
                if not free_core and not free_mib:
                    continue
                cap = _INF_CARD_CAP if card.inference else _DEV_CARD_CAP
                if card.count >= cap:
                    why = Reason.of("stranded.card_full", cap=cap)
                elif free_mib < node.granule:
                    why = Reason.of("stranded.memory_step", free_mib=free_mib, step_mib=node.granule)
                elif not node.has_room(False):
                    why = Reason.of("stranded.node_full")
                else:
                    continue
                stranded.append(StrandedCard(node.name, card.index, free_core, free_mib, why))
        return FragmentationReport(
            sum(s.free_core_percent for s in stranded), sum(s.free_memory_mib for s in stranded), tuple(stranded)
        )

    # --- explaining ---------------------------------------------------------------------------

    def explain(self, request: LaunchRequest) -> Reason:
        """Why ``choose`` found nothing: the binding constraint as a ``Reason`` with its numbers.

        Remembered per request shape until the next placement or release: when a full cluster
        meets a queue of a thousand launches, one scan explains them all.
        """
        key = (_shape(request), request.node_selector, request.die_id)
        cached = self._explained.get(key)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        reason = self._explain(request)
        self._explained[key] = (self._version, reason)
        return reason

    def _explain(self, request: LaunchRequest) -> Reason:
        core, memory, inference, cards, cpu, host_mib = _shape(request)
        if (
            cards == 1
            and not self._host_limited
            and not request.node_selector
            and not request.die_id
            and self._single_granule
            and self._healthy_available
            and memory % self.nodes[0].granule == 0
        ):
            return self._explain_from_summaries(core, memory, inference)
        nodes = [n for n in self.nodes if n.available]
        if request.node_selector:
            nodes = [n for n in nodes if _matches(n, request.node_selector)]
            if not nodes:
                wanted = ", ".join(f"{k}={v}" for k, v in request.node_selector)
                return Reason.of("node.selector", labels=wanted)
        if request.die_id:
            pinned = [(n, c) for n in nodes for c in n.cards if c.die_id == request.die_id]
            if not pinned:
                return Reason.of("card.pinned_missing", die_id=request.die_id)
            node, card = pinned[0]
            if not card.healthy:
                return Reason.of("card.pinned_unhealthy", die_id=request.die_id, node=node.name, card=card.index)
        granular = [n for n in nodes if memory % n.granule == 0]
        if nodes and not granular:
            step = min(n.granule for n in nodes)
            return Reason.of("memory.granularity", memory_mib=memory, step_mib=step)
        if request.die_id:
            has_usable = any(c.healthy and c.die_id == request.die_id for n in granular for c in n.cards)
        else:
            has_usable = any(n.healthy_cards for n in granular)
        if not has_usable:
            return Reason.of("capacity.no_healthy_card")
        open_nodes = [n for n in granular if n.has_room(inference, cards)]
        if not open_nodes:
            return _node_cap_reason(granular, inference, cards)
        host_open = [n for n in open_nodes if n.host_fits(cpu, host_mib)]
        if not host_open:
            return _host_reason(open_nodes, cpu, host_mib)
        open_nodes = host_open
        if cards > 1:
            node, free = max(
                ((n, sum(1 for c in n.cards if c.takes_whole(memory))) for n in open_nodes),
                key=lambda nf: (nf[1], -nf[0].order),
            )
            return Reason.of("whole_cards.free", cards=cards, free=free, node=node.name)
        # One pass, in node then card order, keeping the first of equal maxima; without a pinned
        # card each node's summary already holds its own first maxima.
        most_core = most_mib = -1
        core_at = mib_at = None
        if not request.die_id:
            cap = _INF_CARD_CAP if inference else _DEV_CARD_CAP
            for node in open_nodes:
                if node.summary is None:
                    node.summarise()
                core_card, mib_card = node.summary[cap]
                if core_card is not None and CORE_PERCENT_MAX - core_card.core_used > most_core:
                    most_core, core_at = CORE_PERCENT_MAX - core_card.core_used, (node, core_card)
                if mib_card is not None and mib_card.memory_mib - mib_card.memory_used > most_mib:
                    most_mib, mib_at = mib_card.memory_mib - mib_card.memory_used, (node, mib_card)
        for node in open_nodes if request.die_id else ():
            for card in node.cards:
                if not card.healthy or (request.die_id and card.die_id != request.die_id):
                    continue
                if card.count >= (_INF_CARD_CAP if inference or card.inference else _DEV_CARD_CAP):
                    continue
                free_core = CORE_PERCENT_MAX - card.core_used
                free_mib = card.memory_mib - card.memory_used
                if free_core > most_core:
                    most_core, core_at = free_core, (node, card)
                if free_mib > most_mib:
                    most_mib, mib_at = free_mib, (node, card)
        if core_at is None or mib_at is None:
            return _card_cap_reason(open_nodes, inference, request.die_id)
        if most_core < core:
            node, card = core_at
            return Reason.of("card.core", need_percent=core, best_free_percent=most_core, node=node.name, card=card.index)
        if most_mib < memory:
            node, card = mib_at
            return Reason.of("card.memory", need_mib=memory, best_free_mib=most_mib, node=node.name, card=card.index)
        return Reason.of("capacity.no_single_card", core_percent=core, memory_mib=memory)

    def _explain_from_summaries(self, core: int, memory: int, inference: bool) -> Reason:
        """The common case of ``_explain`` from sorted node summaries instead of a scan.

        Same answers as the scan (a test compares them): the open nodes' best cards are kept in
        sorted lists, updated with every placement and release, so explaining a miss on a
        thousand-node cluster costs a lookup rather than a pass over every card.
        """
        if self._explain_lists is None:
            self._explain_lists = {False: (SortedList(), SortedList(), {}), True: (SortedList(), SortedList(), {})}
            self._explain_open = {False: 0, True: 0}
            self._explain_entries: dict[int, dict[bool, tuple]] = {}
            for node in self.nodes:
                self._explain_refresh(node)
        by_core, by_mib, _ = self._explain_lists[inference]
        if not self._explain_open[inference]:
            return _node_cap_reason([n for n in self.nodes if n.available], inference, 1)
        if not by_core:
            return _card_cap_reason([n for n in self.nodes if n.available and n.has_room(inference)], inference)
        most_core, order, position = by_core[0]
        most_core = -most_core
        if most_core < core:
            node = self.nodes[order]
            card_index = node.cards[position].index
            return Reason.of("card.core", need_percent=core, best_free_percent=most_core, node=node.name, card=card_index)
        most_mib, order, position = by_mib[0]
        most_mib = -most_mib
        if most_mib < memory:
            node = self.nodes[order]
            card_index = node.cards[position].index
            return Reason.of("card.memory", need_mib=memory, best_free_mib=most_mib, node=node.name, card=card_index)
        return Reason.of("capacity.no_single_card", core_percent=core, memory_mib=memory)

    def _explain_refresh(self, node: _Node) -> None:
        # Summaries are worked out only once some request has missed: a cluster that never
        # runs full pays nothing for explanations.
        if self._explain_lists is None:
            return
        if node.summary is None:
            node.summarise()
        old = self._explain_entries.get(node.order, {})
        new = {}
        for inference in (False, True):
            by_core, by_mib, _ = self._explain_lists[inference]
            is_open = node.available and node.has_room(inference)
            core_card, mib_card = node.summary[_INF_CARD_CAP if inference else _DEV_CARD_CAP]
            core_key = mib_key = None
            if is_open and core_card is not None:
                core_key = (core_card.core_used - CORE_PERCENT_MAX, node.order, node.cards.index(core_card))
                mib_key = (mib_card.memory_used - mib_card.memory_mib, node.order, node.cards.index(mib_card))
            previous = old.get(inference, (None, None, False))
            if previous[0] != core_key:
                if previous[0] is not None:
                    by_core.remove(previous[0])
                if core_key is not None:
                    by_core.add(core_key)
            if previous[1] != mib_key:
                if previous[1] is not None:
                    by_mib.remove(previous[1])
                if mib_key is not None:
                    by_mib.add(mib_key)
            self._explain_open[inference] += int(is_open) - int(previous[2])
            new[inference] = (core_key, mib_key, is_open)
        self._explain_entries[node.order] = new

    # --- reclaiming ---------------------------------------------------------------------------

    def reclaim_plan(
        self, request: LaunchRequest, candidates: Iterable[str], preferred: Collection[str] = ()
    ) -> ReclaimPlan | None:
        """The fewest ``candidates`` whose removal lets ``request`` fit, or ``None`` if none can.

        ``candidates`` are the keys that may be taken (borrowed, old enough); ``preferred`` ones
        (already warned) are taken before the others, so a plan made again names the same
        victims. For a request on part of a card, victims are taken preferred, then newest,
        first on each card; among cards the one needing the fewest wins, then the one needing
        the fewest not preferred, ties by node order then card index. For a whole-card request,
        see ``_whole_card_reclaim_plan``. The plan never counts on capacity the request could
        not use (unhealthy cards, unavailable or unmatched nodes, node instance caps).
        """
        core, memory, inference, cards, cpu, host_mib = _shape(request)
        if cards > 1:
            return self._whole_card_reclaim_plan(request, candidates, preferred)
        by_card: dict[int, list[tuple[float, str, _Placement]]] = {}
        cards_with_victims: dict[int, _Card] = {}
        for key in candidates:
            placement = self._placements.get(key)
            if placement is None or placement.whole:
                continue
            card = placement.cards[0]
            by_card.setdefault(id(card), []).append((placement.started_at, key, placement))
            cards_with_victims[id(card)] = card
        best: tuple[int, int, int, int] | None = None
        plan: ReclaimPlan | None = None
        for card in sorted(cards_with_victims.values(), key=lambda c: (c.node.order, c.index)):
            node = card.node
            if not node.available or memory % node.granule:
                continue
            if request.node_selector and not _matches(node, request.node_selector):
                continue
            if not card.healthy or (request.die_id and card.die_id != request.die_id):
                continue
            victims = sorted(by_card[id(card)], key=lambda v: (v[1] not in preferred, -v[0], v[1]))
            core_used, memory_used, count, inf = card.core_used, card.memory_used, card.count, card.inference
            node_count, node_inf = node.count, node.inference
            cpu_used, host_used = node.cpu_used, node.host_mib_used
            chosen: list[str] = []
            for _, key, victim in [(None, None, None), *victims]:
                if victim is not None:
                    chosen.append(key)
                    core_used -= victim.core_percent
                    memory_used -= victim.memory_mib
                    count -= 1
                    node_count -= 1
                    cpu_used -= victim.cpu_millicores
                    host_used -= victim.host_memory_mib
                    if victim.scenario == Scenario.INFERENCE:
                        inf -= 1
                        node_inf -= 1
                card_cap = _INF_CARD_CAP if inference or inf else _DEV_CARD_CAP
                node_cap = _INF_NODE_CAP if inference or node_inf else _DEV_NODE_CAP
                if (
                    core_used + core <= CORE_PERCENT_MAX
                    and memory_used + memory <= card.memory_mib
                    and count < card_cap
                    and node_count < node_cap
                    and (node.cpu_total is None or cpu_used + cpu <= node.cpu_total)
                    and (node.host_mib_total is None or host_used + host_mib <= node.host_mib_total)
                ):
                    rank = (len(chosen), sum(key not in preferred for key in chosen), node.order, card.index)
                    if chosen and (best is None or rank < best):
                        best, plan = rank, ReclaimPlan(tuple(chosen), node.name, card.index, (card.index,))
                    break
        return plan

    def _whole_card_reclaim_plan(
        self, request: LaunchRequest, candidates: Iterable[str], preferred: Collection[str]
    ) -> ReclaimPlan | None:
        """Victims whose removal leaves ``request.cards`` whole, empty cards on one node.

        A card can be emptied when every instance on it is a candidate (a whole-card victim
        empties all of its cards). On each node the cards needing the fewest further victims are
        taken first (ties by card index); among nodes the one needing the fewest victims wins,
        then the fewest not ``preferred``, ties by node order. Victims are listed newest first.
        """
        _, memory, inference, cards, cpu, host_mib = _shape(request)
        eligible: dict[str, _Placement] = {}
        on_card: dict[int, set[str]] = {}
        for key in candidates:
            placement = self._placements.get(key)
            if placement is None:
                continue
            eligible[key] = placement
            for card in placement.cards:
                on_card.setdefault(id(card), set()).add(key)
        best: tuple[int, int, int] | None = None
        plan: ReclaimPlan | None = None
        for node in self.nodes:
            if not node.available or memory % node.granule:
                continue
            if request.node_selector and not _matches(node, request.node_selector):
                continue
            freeable: list[tuple[_Card, set[str]]] = []
            for card in node.cards:
                keys = on_card.get(id(card), set())
                if card.healthy and card.memory_mib >= memory and len(keys) == card.count and not card.unlisted:
                    freeable.append((card, keys))
            if len(freeable) < cards:
                continue
            chosen: set[str] = set()
            taken: list[_Card] = []
            while len(taken) < cards:
                position = min(range(len(freeable)), key=lambda i: (len(freeable[i][1] - chosen), freeable[i][0].index))
                card, keys = freeable.pop(position)
                taken.append(card)
                chosen |= keys
            if not chosen:
                continue  # the request fits here already: nothing to reclaim
            freed = sum(len(eligible[key].cards) for key in chosen)
            freed_inference = sum(len(eligible[key].cards) for key in chosen if eligible[key].scenario == Scenario.INFERENCE)
            cap = _INF_NODE_CAP if inference or node.inference > freed_inference else _DEV_NODE_CAP
            if node.count - freed + cards > cap:
                continue
            freed_cpu = sum(eligible[key].cpu_millicores for key in chosen)
            freed_mib = sum(eligible[key].host_memory_mib for key in chosen)
            if not node.host_fits(cpu - freed_cpu, host_mib - freed_mib):
                continue
            rank = (len(chosen), len(chosen - set(preferred)), node.order)
            if best is None or rank < best:
                victims = tuple(sorted(chosen, key=lambda key: (-eligible[key].started_at, key)))
                indices = tuple(sorted(card.index for card in taken))
                best, plan = rank, ReclaimPlan(victims, node.name, indices[0], indices)
        return plan


class _ShapeIndex:
    """The nodes one request shape fits on, sorted best first for one pair of policies."""

    __slots__ = ("cluster", "shape", "node_policy", "card_policy", "sorted", "keys", "dirty")

    def __init__(self, cluster: Cluster, shape: Shape, node_policy: Policy, card_policy: Policy) -> None:
        self.cluster = cluster
        self.shape = shape
        self.node_policy = node_policy
        self.card_policy = card_policy
        self.keys: dict[int, tuple] = {}
        self.dirty: set[int] = set()
        entries = []
        for node in cluster.nodes:
            key = cluster._node_key(node, shape, node_policy, card_policy)
            if key is not None:
                self.keys[node.order] = key
                entries.append(key)
        self.sorted = SortedList(entries)

    def best(self) -> _Node | None:
        if self.dirty:
            nodes = self.cluster.nodes
            for order in self.dirty:
                self.refresh(nodes[order], self.cluster.node_score(nodes[order]))
            self.dirty.clear()
        if not self.sorted:
            return None
        return self.cluster.nodes[self.sorted[0][-1]]

    def refresh(self, node: _Node, score: int) -> None:
        key = self.cluster._node_key(node, self.shape, self.node_policy, self.card_policy, score=score)
        old = self.keys.get(node.order)
        if key == old:
            return
        if old is not None:
            self.sorted.remove(old)
            del self.keys[node.order]
        if key is not None:
            self.keys[node.order] = key
            self.sorted.add(key)


def _shape(request: LaunchRequest) -> Shape:
    cards = max(1, request.cards)
    inference = request.scenario == Scenario.INFERENCE
    if cards > 1:
        return (CORE_PERCENT_MAX, request.memory_mib, inference, cards, request.cpu_millicores, request.host_memory_mib)
    return (request.core_percent, request.memory_mib, inference, 1, request.cpu_millicores, request.host_memory_mib)


def _matches(node: _Node, selector: tuple[tuple[str, str], ...]) -> bool:
    return all(node.labels.get(k) == v for k, v in selector)


def _node_cap_reason(nodes: list[_Node], inference: bool, cards: int) -> Reason:
    """Why none of ``nodes`` takes ``cards`` more instances, quoting the cap that binds on them.

    A node's cap is 64 once an inference instance is on it or joins it, 128 otherwise.
    """
    names = _names(nodes)
    if cards > 1 and any(n.count < n.cap(inference) for n in nodes):
        return Reason.of("node.instances_room", cards=cards, nodes=names)
    caps = {n.cap(inference) for n in nodes}
    if len(caps) == 1:
        return Reason.of("node.instances_cap", cap=caps.pop(), nodes=names)
    return Reason.of("node.instances_caps", inference_cap=_INF_NODE_CAP, development_cap=_DEV_NODE_CAP, nodes=names)


def _card_cap_reason(nodes: list[_Node], inference: bool, die_id: str = "") -> Reason:
    """Why no healthy card of ``nodes`` (the pinned one with ``die_id``) takes one more instance.

    Each such card holds its maximum: 8 once an inference instance is on it or joins it, 16
    otherwise; the reason quotes the one that binds, or both when the cards differ.
    """
    caps = {
        _INF_CARD_CAP if inference or card.inference else _DEV_CARD_CAP
        for node in nodes
        for card in node.cards
        if card.healthy and (not die_id or card.die_id == die_id)
    }
    if len(caps) <= 1:
        return Reason.of("card.instances_cap", cap=caps.pop() if caps else _INF_CARD_CAP if inference else _DEV_CARD_CAP)
    return Reason.of("card.instances_caps", inference_cap=_INF_CARD_CAP, development_cap=_DEV_CARD_CAP)


def _host_reason(nodes: list[_Node], cpu: int, memory: int) -> Reason:
    """Why none of ``nodes`` has the host CPU or memory left: memory first, with the node that has the most free."""
    limited = [n for n in nodes if n.host_mib_total is not None]
    if limited and not any(n.host_mib_used + memory <= n.host_mib_total for n in limited):
        node = max(limited, key=lambda n: (n.host_mib_total - n.host_mib_used, -n.order))
        free = node.host_mib_total - node.host_mib_used
        return Reason.of("node.host_memory", need_mib=memory, best_free_mib=free, node=node.name)
    limited = [n for n in nodes if n.cpu_total is not None]
    node = max(limited, key=lambda n: (n.cpu_total - n.cpu_used, -n.order))
    return Reason.of("node.host_cpu", need_millicores=cpu, best_free_millicores=node.cpu_total - node.cpu_used, node=node.name)


def _names(nodes: list[_Node]) -> str:
    names = [n.name for n in nodes[:5]]
    return ", ".join(names) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
