"""The contract of a card driver: how the agent reads and changes its node's NPU cards.

Two drivers keep it: ``flexnpu_smi`` (a real node, through the vendor CLIs) and ``simulated``.

Contract (``NodeDriver``):

``inventory() -> list[CardReport]``
    Every physical card, by index. Raises ``DriverError`` when the node cannot be read.

``instances() -> list[InstanceReport]``
    Every FlexNPU instance on the node; an instance spanning several cards has one entry per
    card, with the same ``entity_id``. Raises ``DriverError`` when the node cannot be read —
    never a partial list.

``unregister(entity_id) -> bool``
    Remove the instance (every card of it). ``False`` when the node has no such instance, so a
    second call is harmless. Raises ``DriverError`` when it cannot tell or cannot remove.

``versions() -> VersionsReport``
    The node's driver, firmware and ``npu-smi`` versions; ``""`` for one it cannot tell.
    Raises ``DriverError`` when the node cannot be read at all.

``boot_id() -> str``
    The host's boot id (``/proc/sys/kernel/random/boot_id``, what Kubernetes reports as the
    node's ``bootID``): a new one means the node restarted. ``""`` when it cannot be read.

``device_share() -> bool | None``
    Whether every chip has device-share mode on (``npu-smi info -t device-share``), the
    openFuyao vNPU's precondition; ``None`` when the node cannot tell (a driver before 25.5.0
    knows no such type, or the output does not parse). Never raises.

``register(...)`` and ``set_demand(...)``
    Only the simulated driver implements them (on a real node the FlexNPU device plugin creates
    instances and the workload makes the demand); others raise ``NotSupported``.

The records are the wire format's (``nodeagent.wire``, which says their units): what a driver
returns is what the agent sends.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod

from nodeagent.wire import CardReport, HostReport, InstanceReport, VersionsReport

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class DriverError(Exception):
    """The node could not be read or changed; ``str(exc)`` says which command failed and how."""


class NotSupported(Exception):
    """This driver does not do that (registering instances on a real node)."""


class DuplicateInstance(ValueError):
    """An instance with this entity-id is already registered."""


class UnknownInstance(LookupError):
    """No instance with this entity-id."""


class NodeDriver(ABC):
    """The agent's view of its node (module docstring)."""

    name: str = ""
    registers_instances = False

    @abstractmethod
    def inventory(self) -> list[CardReport]: ...

    def host(self) -> HostReport:
        """The host's CPU and memory: what the operating system reports (the whole machine: the
        agent's own container limits do not apply to ``sysconf``)."""
        cpus = os.cpu_count() or 1
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
        return HostReport(cpu_millicores=cpus * 1000, memory_mib=memory_mib)

    @abstractmethod
    def instances(self) -> list[InstanceReport]: ...

    def versions(self) -> VersionsReport:
        return VersionsReport()

    def boot_id(self) -> str:
        try:
            with open(BOOT_ID_PATH, encoding="ascii") as fh:
                return fh.read().strip()[:64]
        except (OSError, UnicodeDecodeError):
            return ""

    def device_share(self) -> bool | None:
        return None

    @abstractmethod
    def unregister(self, entity_id: str) -> bool: ...

    def register(
        self,
        entity_id: str,
        card_index: int,
        core_percent: int,
        memory_mib: int,
        scenario: str = "development",
        policy: str = "elastic",
    ) -> InstanceReport:
        raise NotSupported(f"the {self.name} driver does not register instances: on a real node the FlexNPU device plugin does")

    def set_demand(self, entity_id: str, demand_percent: int, memory_used_mib: int | None = None) -> InstanceReport:
        raise NotSupported(f"the {self.name} driver cannot set an instance's demand: its workload makes it")
