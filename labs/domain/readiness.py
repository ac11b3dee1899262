"""Whether a node is ready for its device profile: node facts in, ``None`` (ready) or a ``Reason`` out.

A node takes placements only when the vendor's preconditions for its profile hold; otherwise
the ledger would place a share the device plugin cannot serve, and the lab would fail after
it was promised. The preconditions, in the vendors' words (``DESIGN.md`` §1, ``reference/``):

FlexNPU (CCE FlexNPU user guide, 约束与限制)
    "NPU芯片型号: 仅支持Snt9B芯片" (only the Snt9B chip, the 910B series) and "包含支持的NPU驱动HDK
    25.2.0与CANN 8.5.0" (the node image ships HDK 25.2.0 and CANN 8.5.0): the HDK driver
    ``npu-smi`` reports must be 25.2.0 or newer. The host's CANN is not something ``npu-smi``
    prints, so it is not checked here. The device plugin registers ``volcano.sh/flexnpu-*``.

openFuyao vNPU (openFuyao vNPU guide, 安装 / 使用限制)
    "kubectl label node {nodename} huawei.com/vnpu=ready" (the vNPU components run only on
    labelled nodes); "设备共享模式是后续Volcano调度和device plugin上报资源的前置条件" (device-share
    mode, ``npu-smi set -t device-share -i <id> -d 1``, must be on); "支持的NPU芯片型号：310P3、
    910B4 ... 910C暂不支持" (only 310P3 and 910B4; not the 910C); "310P3与910B4芯片软/硬切分均要求
    HDK驱动25.5.0及以上版本" (HDK 25.5.0 or newer). The plugin registers ``huawei.com/vnpu-*``.

HAMi (Ascend)
    Only its registered resources are checked: its chip and driver rules depend on its mode.

Every profile: each of its extended resources advertised with a non-zero amount on the node
("通过kubectl describe node {nodename}查看节点上huawei.com/vnpu-*资源的Capacity/Allocatable，确认NPU
切分资源已正确注册").

A fact nobody could read is ``None`` (or ``""`` for the driver version, ``()`` for the chips)
and is not held against the node: an agent that predates the device-share report, or a driver
with no node objects (local, simulator), leaves the rest of the rules to decide. A fact that
was read and fails its rule makes the node unready with the first failing rule's reason, in
the order above (label, device-share, resources, chip, driver), so the operator fixes the
earliest step of the vendor's installation first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from labs.domain.reasons import Reason

PROFILE_NAMES = {"flexnpu": "FlexNPU", "vnpu": "openFuyao vNPU", "hami": "HAMi"}
VNPU_LABEL = "huawei.com/vnpu"
VNPU_LABEL_READY = "ready"
# The minimum HDK driver per profile, and the chips it supports (the ledger's names, ``Ascend``
# + the model npu-smi prints; a board suffix such as ``910B4-1`` is the same chip).
MIN_DRIVER = {"flexnpu": (25, 2, 0), "vnpu": (25, 5, 0)}
SNT9B = re.compile(r"Ascend910B[1-4]?")
VNPU_CHIPS = ("Ascend310P3", "Ascend910B4")
_VERSION_PART = re.compile(r"([0-9]+)|(?i:(rc|alpha|beta)|b|t)[0-9]*")


@dataclass(frozen=True)
class NodeFacts:
    """What is known of one node. ``profile``: its device profile (``flexnpu``, ``vnpu``, ``hami``).

    ``chip_types``: its cards' chips as the agent names them (``Ascend910B3``); ``driver_version``:
    the HDK driver of ``npu-smi``'s banner; ``device_share``: whether every chip has device-share
    mode on (``npu-smi info -t device-share``); ``labels`` and ``resources``: the Kubernetes node's
    labels and the profile's extended resources with their allocatable amounts (a resource the
    node does not advertise is 0). Unknown: ``()``, ``""``, ``None``.
    """

    profile: str
    chip_types: tuple[str, ...] = ()
    driver_version: str = ""
    device_share: bool | None = None
    labels: Mapping[str, str] | None = None
    resources: Mapping[str, int] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.profile not in PROFILE_NAMES:
            raise ValueError(f"unknown device profile {self.profile!r}; choose one of {', '.join(sorted(PROFILE_NAMES))}")
        if not isinstance(self.chip_types, tuple) or not all(isinstance(c, str) for c in self.chip_types):
            raise TypeError(f"NodeFacts.chip_types must be a tuple of str, not {self.chip_types!r}")
        if not isinstance(self.driver_version, str):
            raise TypeError(f"NodeFacts.driver_version must be a str, not {self.driver_version!r}")
        if self.device_share not in (None, True, False):
            raise TypeError(f"NodeFacts.device_share must be True, False or None, not {self.device_share!r}")
        for name, amount in (self.resources or {}).items():
            if not isinstance(amount, int) or isinstance(amount, bool) or amount < 0:
                raise ValueError(f"NodeFacts.resources[{name!r}] must be a whole number >= 0, not {amount!r}")


def node_readiness(facts: NodeFacts) -> Reason | None:
    """``None`` when ``facts`` meet every precondition of the node's profile, else why not (module docstring)."""
    profile = PROFILE_NAMES[facts.profile]
    if facts.profile == "vnpu":
        if facts.labels is not None and facts.labels.get(VNPU_LABEL) != VNPU_LABEL_READY:
            return Reason.of("readiness.vnpu_label", label=f"{VNPU_LABEL}={VNPU_LABEL_READY}")
        if facts.device_share is False:
            return Reason.of("readiness.device_share_off")
    for name, amount in sorted((facts.resources or {}).items()):
        if amount <= 0:
            return Reason.of("readiness.resource_missing", resource=name, profile=profile)
    for chip in facts.chip_types:
        if chip and not chip_supported(facts.profile, chip):
            supported = {"flexnpu": "Snt9B (Ascend910B)", "vnpu": ", ".join(VNPU_CHIPS)}.get(facts.profile, "")
            return Reason.of("readiness.chip_unsupported", chip=chip, profile=profile, supported=supported)
    minimum = MIN_DRIVER.get(facts.profile)
    if minimum is not None and facts.driver_version:
        version = driver_version_tuple(facts.driver_version)
        wanted = ".".join(map(str, minimum))
        if version is None:
            return Reason.of("readiness.driver_unreadable", version=facts.driver_version, profile=profile, minimum=wanted)
        if version < minimum:
            return Reason.of("readiness.driver_too_old", version=facts.driver_version, profile=profile, minimum=wanted)
    return None


def chip_supported(profile: str, chip: str) -> bool:
    """Whether ``profile`` runs on ``chip`` (the ledger's name); HAMi: any chip."""
    model = chip.split("-", 1)[0]
    if profile == "flexnpu":
        return bool(SNT9B.fullmatch(model))
    if profile == "vnpu":
        return model in VNPU_CHIPS
    return True


def driver_version_tuple(version: str) -> tuple[int, ...] | None:
    """``"25.5.0"`` as ``(25, 5, 0)``; a pre-release (``25.5.rc1``) sorts below its release, its
    part read as ``-1``; a build number (``23.0.rc3.b060``, ``25.5.0.B100``) ends the version;
    ``None`` for what is not a version."""
    parts: list[int] = []
    for piece in version.strip().split("."):
        match = _VERSION_PART.fullmatch(piece)
        if match is None or (not parts and match[1] is None):
            return None
        if match[1] is None:
            if match[2]:
                parts.append(-1)
            break
        parts.append(int(match[1]))
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)
