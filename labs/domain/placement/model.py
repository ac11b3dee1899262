"""The records of placement: what comes in (capacities, requests, the configuration), what goes
out (reports, plans, holdings) and the one charge rule.


The records coming in (``NodeCapacity``, ``CardCapacity``, ``Instance``, ``LaunchRequest``,
``PlacementConfig``) check their fields when made and raise ``TypeError``/``ValueError`` naming
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from labs.domain.checks import as_enum, check_bool, check_int, check_number, check_optional_int, check_str, check_type
from labs.domain.quota import Resources
from labs.domain.reasons import Reason
from labs.domain.units import CORE_PERCENT_MAX, MEMORY_GRANULE_MIB, Scenario


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
    # Drained by an operator (for maintenance, or being emptied for it): it takes no new
    # placement, so it is not ``available``; a miss says the servers are closed for maintenance.
    maintenance: bool = False

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
        check_bool("NodeCapacity", "maintenance", self.maintenance)
        if self.maintenance and self.available:
            raise ValueError(f"NodeCapacity {self.name}: a node under maintenance is not available")
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
