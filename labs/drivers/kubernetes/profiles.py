"""Device profiles: how one NPU share (a ``CardBinding``) is asked for in a pod.

Each profile renders the share as extended resources (requests == limits, as every NPU device
plugin requires), pod annotations and a node selector. The ledger has already placed the
share on a node and card, so every profile pins the node; profiles whose scheduler can be told
the card (openFuyao's die id) pin that too. Amounts that the device plugin cannot express
exactly are refused with ``DriverError`` rather than rounded: rounding a memory cap up would
break the per-card sum the ledger keeps, rounding it down would break the student's promise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from labs.drivers.base import CardBinding, DriverError, DriverRefused
from labs.drivers.options import check_options

HOSTNAME_LABEL = "kubernetes.io/hostname"
MEMORY_SEEN = ("card", "cap")


@dataclass(frozen=True)
class DeviceRequest:
    """What a profile adds to a pod: container resources (requests == limits), annotations, node selector."""

    resources: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)


def _refuse_best_effort(card: CardBinding, profile: str) -> None:
    if card.share_policy == "best-effort":
        raise DriverRefused(
            f"{profile} has no best-effort instances (its shares always have an AI Core floor); "
            "only openFuyao vNPU in soft mode runs them."
        )


def _check_core_percent(card: CardBinding) -> int:
    core = card.core_percent
    if not isinstance(core, int) or isinstance(core, bool):
        raise DriverError(f"NPU core share must be a whole percent, got {core!r}.")
    if _whole_cards(card) > 1:
        if core != 100 * card.cards:
            raise DriverError(f"An instance on {card.cards} whole cards has {100 * card.cards} % of AI Core, not {core} %.")
    elif not 1 <= core <= 100:
        raise DriverError(f"NPU core share must be a whole percent from 1 to 100, got {core!r}.")
    return core


def _whole_cards(card: CardBinding) -> int:
    """How many whole cards the binding asks for (1: a share of one card)."""
    cards = card.cards
    if not isinstance(cards, int) or isinstance(cards, bool) or cards < 1:
        raise DriverError(f"The number of cards must be a whole number from 1, got {cards!r}.")
    return cards


def _memory_units(card: CardBinding, unit_mib: int, resource: str) -> int:
    memory = card.memory_mib
    if not isinstance(memory, int) or isinstance(memory, bool) or memory <= 0:
        raise DriverError(f"NPU memory must be a positive number of MiB, got {memory!r}.")
    if memory % unit_mib:
        raise DriverError(
            f"NPU memory {memory} MiB is not a multiple of {unit_mib} MiB, the unit of {resource}; "
            f"use {memory // unit_mib * unit_mib or unit_mib} or {(memory // unit_mib + 1) * unit_mib} MiB."
        )
    return memory // unit_mib


def _check_memory_seen(value: str) -> None:
    if value not in MEMORY_SEEN:
        raise ValueError(
            f"memory_seen must be 'card' (the runtime reports the whole card) or 'cap' "
            f"(it reports the share's cap, as soft partitioning does), got {value!r}"
        )


def _node_selector(card: CardBinding) -> dict[str, str]:
    if not card.node:
        raise DriverError("The NPU share has no node; the ledger must place it before the pod is made.")
    return {HOSTNAME_LABEL: card.node}


class DeviceProfile:
    """Base class. ``render`` is for a pod, ``quota`` for a namespace's ResourceQuota."""

    name = ""
    # How the portal learns which card an instance really got: "reported" (the node agent lists
    # each instance's card, and the ledger follows it), "pinned" (the pod names the card) or
    # "none" (neither: the ledger's card is a guess; only node totals are certain).
    card_truth = "none"
    # What the memory query (``aclrtGetMemInfo``, what vLLM reads) reports inside the pod:
    # "card" (the whole card's HBM; the plugin only enforces the cap) or "cap" (soft
    # partitioning hooks the query and reports the share's cap as the total).
    memory_seen = "card"
    # Whether it runs best-effort instances (no AI Core floor: ``CardBinding.share_policy``).
    best_effort = False

    def render(self, card: CardBinding) -> DeviceRequest:
        raise NotImplementedError

    def resource_names(self) -> tuple[str, str, str, int]:
        """(instance count, core percent, memory) resource names and the memory unit in MiB."""
        raise NotImplementedError

    def quota(self, *, core_percent: int, memory_mib: int, instances: int) -> dict[str, str]:
        """ResourceQuota ``hard`` entries for a course total (extended resources are quota'd on requests)."""
        count, core, memory, unit_mib = self.resource_names()
        # The device plugin's count is one per share but n for a lab on n whole cards, which the
        # portal counts as one instance of 100 x n % core: a course can use at most one more per
        # 100 % of its core than it has instances, and the namespace must let in what it admits.
        return {
            f"requests.{core}": str(core_percent),
            f"requests.{memory}": str(memory_mib // unit_mib),
            f"requests.{count}": str(instances + core_percent // 100),
            "pods": str(instances),
        }


@dataclass(frozen=True)
class FlexNPUProfile(DeviceProfile):
    """Huawei CCE FlexNPU: core floor in percent, memory cap in 128 MiB units, one card per instance."""

    memory_seen: str = "card"
    name = "flexnpu"
    card_truth = "reported"  # flexnpu-smi info lists each entity-id on its card
    CORE = "volcano.sh/flexnpu-core.percentage"
    MEMORY = "volcano.sh/flexnpu-memory.128mi"
    NUM = "volcano.sh/flexnpu-num"
    MEMORY_UNIT_MIB = 128

    def __post_init__(self) -> None:
        _check_memory_seen(self.memory_seen)

    def render(self, card: CardBinding) -> DeviceRequest:
        """One share: ``flexnpu-num`` 1. Whole cards: ``flexnpu-num`` N with ``core.percentage``
        N x 100 (the guide: a pod with more than one vNPU takes whole cards' AI Core) and the
        memory of all N cards."""
        _refuse_best_effort(card, "FlexNPU")
        core = _check_core_percent(card)
        units = _memory_units(card, self.MEMORY_UNIT_MIB, self.MEMORY)
        return DeviceRequest(
            resources={self.CORE: str(core), self.MEMORY: str(units), self.NUM: str(card.cards)},
            node_selector=_node_selector(card),
        )

    def resource_names(self) -> tuple[str, str, str, int]:
        return self.NUM, self.CORE, self.MEMORY, self.MEMORY_UNIT_MIB


@dataclass(frozen=True)
class VNPUProfile(DeviceProfile):
    """openFuyao vNPU: ``vnpu-cores`` in percent, memory in 1 GiB units, card pinned by die id and type.

    ``mode`` is ``soft`` (idle compute may be lent) or ``hard``; ``policy`` is the soft-mode
    share policy: ``elastic`` is FlexNPU's behaviour (floor guaranteed, idle lent out).
    ``hard_aicpu_level`` is the hard mode's AI CPU allotment (``huawei.com/vnpu-hard-aicpu-level``,
    sent in hard mode only; the guide's example is ``low``). ``node_policy`` and ``device_policy``
    (``binpack`` or ``spread``; ``""``: not sent, the scheduler's default) are the pod's node- and
    device-level scheduling policies. A card with a die id is pinned by it and by its chip type
    (``huawei.com/vnpu-use-npu-type``, e.g. ``NPU-ASCEND-910B4``): the guide says the two together
    name one NPU.
    """

    mode: str = "soft"
    policy: str = "elastic"
    memory_seen: str = "card"
    hard_aicpu_level: str = "low"
    node_policy: str = ""
    device_policy: str = ""
    name = "vnpu"
    card_truth = "pinned"  # by die id (huawei.com/vnpu-use-npu-dieID), where the agent or the node knows it
    NUMBER = "huawei.com/vnpu-number"
    CORES = "huawei.com/vnpu-cores"
    MEMORY = "huawei.com/vnpu-memory.1Gi"
    MODE = "huawei.com/vnpu-mode"
    POLICY = "huawei.com/vnpu-soft-scheduler-policy"
    DIE_ID = "huawei.com/vnpu-use-npu-dieID"
    NPU_TYPE = "huawei.com/vnpu-use-npu-type"
    HARD_AICPU_LEVEL = "huawei.com/vnpu-hard-aicpu-level"
    NODE_POLICY = "huawei.com/vnpu-pod-node-scheduler-policy"
    DEVICE_POLICY = "huawei.com/vnpu-pod-device-scheduler-policy"
    AICPU_LEVELS = ("low", "middle", "high")
    MEMORY_UNIT_MIB = 1024

    def __post_init__(self) -> None:
        _check_memory_seen(self.memory_seen)
        if self.mode not in {"soft", "hard"}:
            raise ValueError(f"vNPU mode must be 'soft' or 'hard', got {self.mode!r}")
        if self.policy not in {"fixed-share", "elastic", "best-effort"}:
            raise ValueError(f"vNPU policy must be fixed-share, elastic or best-effort, got {self.policy!r}")
        if self.hard_aicpu_level not in self.AICPU_LEVELS:
            levels = ", ".join(self.AICPU_LEVELS)
            raise ValueError(f"vNPU hard_aicpu_level must be one of {levels}, got {self.hard_aicpu_level!r}")
        for option in ("node_policy", "device_policy"):
            if getattr(self, option) not in {"", "binpack", "spread"}:
                raise ValueError(f"vNPU {option} must be 'binpack', 'spread' or '' (not sent), got {getattr(self, option)!r}")

    @property
    def best_effort(self) -> bool:
        """Soft mode only: "best-effort策略取值范围0~100；硬切分取值范围1~100"."""
        return self.mode == "soft"

    def render(self, card: CardBinding) -> DeviceRequest:
        """One share: ``vnpu-number`` 1 with cores, memory, mode (and die id). Whole cards:
        ``vnpu-number`` N alone (the guide's two-whole-card example) in hard mode, since soft
        partitioning refuses ``vnpu-number`` > 1; one die id cannot pin N cards, so none is sent."""
        best_effort = card.share_policy == "best-effort"
        if best_effort and not self.best_effort:
            raise DriverRefused("openFuyao vNPU runs best-effort instances in soft mode only; this node pool is in hard mode.")
        if best_effort and card.core_percent != 0:
            raise DriverError(f"A best-effort vNPU instance has no AI Core floor (cores 0), got {card.core_percent!r}.")
        core = 0 if best_effort else _check_core_percent(card)
        if card.cards > 1:
            return DeviceRequest(
                resources={self.NUMBER: str(card.cards)},
                annotations={self.MODE: "hard"},
                node_selector=_node_selector(card),
            )
        units = _memory_units(card, self.MEMORY_UNIT_MIB, self.MEMORY)
        annotations = {self.MODE: self.mode}
        if self.mode == "soft":
            annotations[self.POLICY] = "best-effort" if best_effort else self.policy
        else:
            annotations[self.HARD_AICPU_LEVEL] = self.hard_aicpu_level
        if self.node_policy:
            annotations[self.NODE_POLICY] = self.node_policy
        if self.device_policy:
            annotations[self.DEVICE_POLICY] = self.device_policy
        if card.die_id:
            annotations[self.DIE_ID] = card.die_id
            if card.chip_type:
                annotations[self.NPU_TYPE] = vnpu_npu_type(card.chip_type)
        return DeviceRequest(
            resources={self.NUMBER: "1", self.CORES: str(core), self.MEMORY: str(units)},
            annotations=annotations,
            node_selector=_node_selector(card),
        )

    def resource_names(self) -> tuple[str, str, str, int]:
        return self.NUMBER, self.CORES, self.MEMORY, self.MEMORY_UNIT_MIB


@dataclass(frozen=True)
class HAMiProfile(DeviceProfile):
    """HAMi / Volcano deviceshare for Ascend: device count, memory in MiB, core in percent."""

    device: str = "Ascend910B3"
    node_policy: str = "binpack"
    card_policy: str = "binpack"
    # HAMi's in-container library hooks the memory query and reports the cap as the total.
    memory_seen: str = "cap"
    name = "hami"
    card_truth = "none"  # HAMi's scheduler picks the card and the portal's agent cannot see it

    def __post_init__(self) -> None:
        _check_memory_seen(self.memory_seen)
        for policy in (self.node_policy, self.card_policy):
            if policy not in {"binpack", "spread"}:
                raise ValueError(f"HAMi scheduler policy must be 'binpack' or 'spread', got {policy!r}")

    def render(self, card: CardBinding) -> DeviceRequest:
        """One share: one device with its memory (MiB) and core (percent). Whole cards: N devices
        and nothing else (no memory or core limit: each device is the whole card)."""
        _refuse_best_effort(card, "HAMi")
        core = _check_core_percent(card)
        annotations = {"hami.io/node-scheduler-policy": self.node_policy, "hami.io/gpu-scheduler-policy": self.card_policy}
        if card.cards > 1:
            return DeviceRequest(
                resources={f"huawei.com/{self.device}": str(card.cards)},
                annotations=annotations,
                node_selector=_node_selector(card),
            )
        memory = _memory_units(card, 1, f"huawei.com/{self.device}-memory")
        return DeviceRequest(
            resources={
                f"huawei.com/{self.device}": "1",
                f"huawei.com/{self.device}-memory": str(memory),
                f"huawei.com/{self.device}-core": str(core),
            },
            annotations=annotations,
            node_selector=_node_selector(card),
        )

    def resource_names(self) -> tuple[str, str, str, int]:
        return f"huawei.com/{self.device}", f"huawei.com/{self.device}-core", f"huawei.com/{self.device}-memory", 1


def vnpu_npu_type(chip_type: str) -> str:
    """The vNPU device type of a chip the ledger names ``chip_type``: ``Ascend310P3`` is
    ``NPU-ASCEND-310P3``, as the guide's example and the node's ``huawei.com/node-vnpu-register``
    spell it; a type already so spelt is kept."""
    if chip_type.upper().startswith("NPU-"):
        return chip_type
    return "NPU-ASCEND-" + chip_type.removeprefix("Ascend").upper()


def ledger_chip_type(npu_type: str) -> str:
    """The ledger's name for a vNPU device type: ``NPU-ASCEND-910B4`` is ``Ascend910B4`` (``vnpu_npu_type`` undone)."""
    model = npu_type.upper().removeprefix("NPU-").removeprefix("ASCEND-")
    return f"Ascend{model}" if model else ""


VNPU_REGISTER_ANNOTATION = "huawei.com/node-vnpu-register"


def parse_vnpu_register(value: str) -> tuple[tuple[str, str], ...] | None:
    """Each card's (die id, ledger chip type) from a node's ``huawei.com/node-vnpu-register``, in order.

    FORMAT FROM THE GUIDE'S DESCRIPTION, NOT FROM A CAPTURED ANNOTATION: "输出字段之间以分号分隔，
    第2个字段为dieID，第5个字段为芯片类型" (fields separated by semicolons, the second the die id,
    the fifth the chip type). One card per record; records are taken to be separated by ``:`` or
    line breaks, as HAMi's register annotations are. ``None`` when a record has fewer than five
    fields or no die id: then nothing of it is used.
    """
    records = [record.strip() for record in re.split(r"[:\n]", value) if record.strip()]
    devices = []
    for record in records:
        fields = [part.strip() for part in record.split(";")]
        if len(fields) < 5 or not fields[1] or not fields[4]:
            return None
        devices.append((fields[1], ledger_chip_type(fields[4])))
    return tuple(devices) or None


PROFILES: dict[str, type[DeviceProfile]] = {"flexnpu": FlexNPUProfile, "vnpu": VNPUProfile, "hami": HAMiProfile}


def get_profile(name: str = "flexnpu", **settings: object) -> DeviceProfile:
    """The profile called ``name`` (``flexnpu``, ``vnpu`` or ``hami``) with ``settings``, its own options.

    ``ValueError`` for any other name, and for a setting the profile does not take (``vnpu``:
    ``mode``, ``policy``, ``hard_aicpu_level``, ``node_policy``, ``device_policy``; ``hami``:
    ``device``, ``node_policy``, ``card_policy``; every profile: ``memory_seen``, ``"card"`` or
    ``"cap"``, what the pod's memory query reports as the total), of the wrong type or out of range.
    """
    try:
        cls = PROFILES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown device profile {name!r}; choose one of {', '.join(sorted(PROFILES))}") from None
    check_options(cls, settings, owner=f"device profile {name!r}")
    return cls(**settings)
