"""The fake Ascend nodes: Node objects with the capacity and labels each device profile expects.

Each node carries one device profile (a real node runs one NPU device plugin) and advertises
that profile's extended resources for ``cards`` cards, as the plugin would:

* the instance count (``volcano.sh/flexnpu-num``, ``huawei.com/vnpu-number``,
  ``huawei.com/Ascend910B3``): ``cards * instances_per_card``, since every share of a card is
  one instance;
* the core share in percent: ``cards * 100``;
* the memory in the profile's unit (128 MiB, 1 GiB or 1 MiB): ``cards * card_memory_mib / unit``.

The names come from the driver's profiles (``labs.drivers.kubernetes.profiles``), so a node and
a pod the driver makes cannot disagree on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labs.drivers.kubernetes.profiles import HOSTNAME_LABEL, PROFILES, get_profile

# The device profile of a node, for the driver's ``pool_profiles`` ("npu-lab.portal/device-profile=vnpu:vnpu").
PROFILE_LABEL = "npu-lab.portal/device-profile"
# What deploy/base/node-agent.yaml selects NPU nodes by.
NPU_NODE_LABELS = {"accelerator": "huawei-ascend", "node.kubernetes.io/npu": "true"}
# The label the node simulator's nodes carry, so it never touches a node it did not make.
SIMULATED_LABEL = "npu-lab.portal/simulated"
ASCEND_910B3_MEMORY_MIB = 64 * 1024


@dataclass(frozen=True)
class FakeNode:
    """One fake node. Amounts are integers with their unit in the name; ``pods`` is the pod limit."""

    name: str
    profile: str = "flexnpu"
    cards: int = 8
    card_memory_mib: int = ASCEND_910B3_MEMORY_MIB
    instances_per_card: int = 100
    cpu_cores: int = 192
    memory_gib: int = 1536
    ephemeral_storage_gib: int = 3840
    pods: int = 256
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown device profile {self.profile!r}; choose one of {', '.join(sorted(PROFILES))}")
        amounts = ("cards", "card_memory_mib", "instances_per_card", "cpu_cores", "memory_gib", "ephemeral_storage_gib", "pods")
        for name in amounts:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"FakeNode.{name} must be a positive integer, got {value!r}")

    def npu_resources(self) -> dict[str, str]:
        """The profile's extended resources for the node's cards."""
        count, core, memory, unit_mib = get_profile(self.profile).resource_names()
        return {
            count: str(self.cards * self.instances_per_card),
            core: str(self.cards * 100),
            memory: str(self.cards * self.card_memory_mib // unit_mib),
        }

    def capacity(self) -> dict[str, str]:
        return {
            "cpu": str(self.cpu_cores),
            "memory": f"{self.memory_gib}Gi",
            "ephemeral-storage": f"{self.ephemeral_storage_gib}Gi",
            "pods": str(self.pods),
            **self.npu_resources(),
        }

    def all_labels(self) -> dict[str, str]:
        return {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            HOSTNAME_LABEL: self.name,
            PROFILE_LABEL: self.profile,
            SIMULATED_LABEL: "true",
            **NPU_NODE_LABELS,
            **self.labels,
        }

    def manifest(self) -> dict[str, Any]:
        """The Node object to create (its status is posted separately, as a kubelet does)."""
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": self.all_labels()}}


def fake_nodes(
    count: int, *, profiles: tuple[str, ...] = ("flexnpu", "vnpu", "hami"), prefix: str = "npu-node", **settings: Any
) -> list[FakeNode]:
    """``count`` nodes named ``<prefix>-1``... whose profiles take turns in ``profiles``."""
    if not profiles:
        raise ValueError("fake_nodes needs at least one device profile")
    return [FakeNode(name=f"{prefix}-{i + 1}", profile=profiles[i % len(profiles)], **settings) for i in range(count)]
