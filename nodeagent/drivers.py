"""How the agent reads and changes its node: the ``flexnpu-smi`` driver and the simulated one.

Contract (``NodeDriver``):

``inventory() -> list[CardInfo]``
    Every physical card, by index. Raises ``DriverError`` when the node cannot be read.

``instances() -> list[InstanceInfo]``
    Every FlexNPU instance on the node; an instance spanning several cards has one entry per
    card, with the same ``entity_id``. Raises ``DriverError`` when the node cannot be read —
    never a partial list.

``unregister(entity_id) -> bool``
    Remove the instance (every card of it). ``False`` when the node has no such instance, so a
    second call is harmless. Raises ``DriverError`` when it cannot tell or cannot remove.

``versions() -> NodeVersions``
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

Amounts are integers: ``core_percent`` is the AI Core floor in percent of one card,
``aicore_percent`` the AI Core in use now, ``*_mib`` memory in MiB, a card's
``power_milliwatts`` and ``temperature_celsius`` what ``npu-smi`` reads (``None``: not reported).
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from labs.domain.shares import POLICIES, ShareDemand, delivered_shares
from labs.domain.units import CARD_INSTANCE_CAP, MEMORY_GRANULE_MIB, NODE_INSTANCE_CAP, Scenario
from nodeagent.parsers import (
    IDENTIFIER,
    NpuSmiInfo,
    ParseError,
    chip_type,
    parse_flexnpu_smi_info,
    parse_npu_smi_board,
    parse_npu_smi_device_share,
    parse_npu_smi_info,
)

logger = logging.getLogger("nodeagent")


BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class DriverError(Exception):
    """The node could not be read or changed; ``str(exc)`` says which command failed and how."""


class NotSupported(Exception):
    """This driver does not do that (registering instances on a real node)."""


class DuplicateInstance(ValueError):
    """An instance with this entity-id is already registered."""


class UnknownInstance(LookupError):
    """No instance with this entity-id."""


@dataclass(frozen=True)
class HostInfo:
    """The node's host CPU (millicores) and memory (MiB), before any reserve."""

    cpu_millicores: int
    memory_mib: int


@dataclass(frozen=True)
class CardInfo:
    index: int
    die_id: str
    chip_type: str
    memory_total_mib: int
    memory_used_mib: int
    aicore_percent: int
    healthy: bool
    power_milliwatts: int | None = None
    temperature_celsius: int | None = None


@dataclass(frozen=True)
class NodeVersions:
    """What the node runs: the NPU driver (``npu-smi info``'s banner, "Version:"), the card
    firmware (``npu-smi info -t board``) and ``npu-smi`` itself; ``""`` for one not known."""

    driver: str = ""
    firmware: str = ""
    npu_smi: str = ""


@dataclass(frozen=True)
class InstanceInfo:
    entity_id: str
    flexnpu_id: str
    card_index: int
    core_percent: int
    memory_mib: int
    memory_used_mib: int
    aicore_percent: int
    demand_percent: int | None = None


class NodeDriver(ABC):
    """The agent's view of its node (module docstring)."""

    name: str = ""
    registers_instances = False

    @abstractmethod
    def inventory(self) -> list[CardInfo]: ...

    def host(self) -> HostInfo:
        """The host's CPU and memory: what the operating system reports (the whole machine: the
        agent's own container limits do not apply to ``sysconf``)."""
        cpus = os.cpu_count() or 1
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
        return HostInfo(cpu_millicores=cpus * 1000, memory_mib=memory_mib)

    @abstractmethod
    def instances(self) -> list[InstanceInfo]: ...

    def versions(self) -> NodeVersions:
        return NodeVersions()

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
    ) -> InstanceInfo:
        raise NotSupported(f"the {self.name} driver does not register instances: on a real node the FlexNPU device plugin does")

    def set_demand(self, entity_id: str, demand_percent: int, memory_used_mib: int | None = None) -> InstanceInfo:
        raise NotSupported(f"the {self.name} driver cannot set an instance's demand: its workload makes it")


class FlexnpuSmiDriver(NodeDriver):
    """Reads the node with ``npu-smi info`` and ``flexnpu-smi info``; removes with ``flexnpu-smi unregister -u``.

    Commands run without a shell, in their own process group, killed after ``timeout_seconds``,
    and one at a time: the vendor says ``npu-smi`` must not run concurrently, and the agent's
    threaded server could otherwise run it for ``/v1/inventory`` and ``/metrics`` at once. The
    ``npu-smi info`` output is reused for ``npu_smi_cache_seconds`` (0: never), so a scrape and
    a sync arriving together cost one run. ``flexnpu-smi info`` is never cached: an unregister
    is decided on what it prints now.

    A command that fails, times out or prints what does not parse raises ``DriverError``; an
    unregister is decided only from ``flexnpu-smi info`` output that parsed completely, and only
    FlexNPU ids read from it are passed to ``unregister -u``. ``die_id`` is empty: ``npu-smi
    info`` does not show it.

    Each *chip* is a card: an Atlas A3 or 300I Duo NPU holds two, and an instance lands on one.
    Its index is the chip's Phy-ID/Device number when ``npu-smi`` prints one, else the NPU
    number; its memory is the chip's own (HBM, or DDR on 310P/310B); its chip type comes from
    ``chip_type`` (name and memory: a 32 GB first-generation ``910B`` is ``Ascend910``). The
    card's ``aicore_percent`` is what ``npu-smi`` prints, for display only: the driver forces
    it to 0 in vNPU mode, so shares are never accounted from it (instances report their own).
    """

    name = "flexnpu-smi"

    def __init__(
        self,
        binary: str = "flexnpu-smi",
        npu_smi: str = "npu-smi",
        timeout_seconds: float = 10,
        npu_smi_cache_seconds: float = 2,
        versions_cache_seconds: float = 300,
    ) -> None:
        if npu_smi_cache_seconds < 0:
            raise ValueError(f"the npu-smi cache lifetime must be 0 or more seconds, got {npu_smi_cache_seconds:g}")
        self.binary = binary
        self.npu_smi = npu_smi
        self.timeout_seconds = timeout_seconds
        self.npu_smi_cache_seconds = npu_smi_cache_seconds
        # Two removals of one instance at once would both see it and the second would fail.
        self._unregister_lock = threading.Lock()
        # One vendor command at a time (npu-smi must not run concurrently).
        self._command_lock = threading.Lock()
        # Held while npu-smi info runs, so callers arriving meanwhile wait and reuse its output.
        self._npu_smi_lock = threading.Lock()
        self._npu_smi_output: tuple[float, bytes] | None = None
        self.versions_cache_seconds = versions_cache_seconds
        self._firmware: tuple[float, str] | None = None
        self._firmware_lock = threading.Lock()
        self._device_share: tuple[float, bool | None] | None = None
        self._last_info: NpuSmiInfo | None = None

    def inventory(self) -> list[CardInfo]:
        info = self._parsed_npu_smi_info()
        return [
            CardInfo(
                index=chip.npu_id if chip.device_id is None else chip.device_id,
                die_id="",
                chip_type=chip_type(chip.name, chip.memory_total_mib),
                memory_total_mib=chip.memory_total_mib,
                memory_used_mib=chip.memory_used_mib,
                aicore_percent=chip.aicore_percent,
                healthy=chip.healthy,
                power_milliwatts=chip.power_milliwatts,
                temperature_celsius=chip.temperature_celsius,
            )
            for chip in info.chips
        ]

    def versions(self) -> NodeVersions:
        # The banner of the output the inventory just read: no second run for the same request.
        info = self._last_info or self._parsed_npu_smi_info()
        firmware = self._firmware_version(info.chips[0].npu_id)
        return NodeVersions(driver=info.version, firmware=firmware, npu_smi=info.npu_smi_version)

    def _parsed_npu_smi_info(self) -> NpuSmiInfo:
        command = [self.npu_smi, "info"]
        try:
            info = parse_npu_smi_info(self._npu_smi_info(command))
        except ParseError as exc:
            raise _unparsed(command, exc) from None
        self._last_info = info
        return info

    def _firmware_version(self, npu_id: int) -> str:
        with self._firmware_lock:
            cached = self._firmware
            if cached is not None and time.monotonic() - cached[0] < self.versions_cache_seconds:
                return cached[1]
            command = [self.npu_smi, "info", "-t", "board", "-i", str(npu_id)]
            try:
                firmware = parse_npu_smi_board(self._run(command))
            except ParseError as exc:
                logger.warning("%s", _unparsed(command, exc))
                firmware = ""
            except DriverError as exc:
                logger.warning("cannot read the firmware version: %s", exc)
                firmware = ""
            self._firmware = (time.monotonic(), firmware)
            return firmware

    def device_share(self) -> bool | None:
        """Read once per ``versions_cache_seconds``, like the firmware: it changes only by hand."""
        with self._firmware_lock:
            cached = self._device_share
            if cached is not None and time.monotonic() - cached[0] < self.versions_cache_seconds:
                return cached[1]
            command = [self.npu_smi, "info", "-t", "device-share"]
            try:
                shares = parse_npu_smi_device_share(self._run(command))
                share: bool | None = all(shares.values())
            except ParseError as exc:
                logger.warning("%s", _unparsed(command, exc))
                share = None
            except DriverError as exc:
                logger.warning("cannot read the device-share mode: %s", exc)
                share = None
            self._device_share = (time.monotonic(), share)
            return share

    def _npu_smi_info(self, command: list[str]) -> bytes:
        with self._npu_smi_lock:
            cached = self._npu_smi_output
            if cached is not None and time.monotonic() - cached[0] < self.npu_smi_cache_seconds:
                return cached[1]
            output = self._run(command)
            self._npu_smi_output = (time.monotonic(), output)
            return output

    def instances(self) -> list[InstanceInfo]:
        command = [self.binary, "info"]
        try:
            rows = parse_flexnpu_smi_info(self._run(command))
        except ParseError as exc:
            raise _unparsed(command, exc) from None
        return [
            InstanceInfo(
                entity_id=row.entity_id,
                flexnpu_id=row.flexnpu_id,
                card_index=row.npu_id,
                core_percent=row.core_percent,
                memory_mib=row.memory_limit_mib,
                memory_used_mib=row.memory_used_mib,
                aicore_percent=row.aicore_percent,
            )
            for row in rows
        ]

    def unregister(self, entity_id: str) -> bool:
        with self._unregister_lock:
            flexnpu_ids = [i.flexnpu_id for i in self.instances() if i.entity_id == entity_id]
            for flexnpu_id in flexnpu_ids:
                self._run([self.binary, "unregister", "-u", flexnpu_id])
            return bool(flexnpu_ids)

    def _run(self, command: list[str]) -> bytes:
        with self._command_lock:
            return self._run_alone(command)

    def _run_alone(self, command: list[str]) -> bytes:
        shown = " ".join(command)
        try:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        except OSError as exc:
            raise DriverError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        with process:
            try:
                stdout, stderr = process.communicate(timeout=self.timeout_seconds)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                raise DriverError(f"'{shown}' did not finish within {self.timeout_seconds:g} s") from None
        if process.returncode != 0:
            detail = stderr.decode("utf-8", "replace").strip() or stdout.decode("utf-8", "replace").strip()
            detail = detail.splitlines()[-1][:300] if detail else "no output"
            raise DriverError(f"'{shown}' exited with status {process.returncode}: {detail}")
        return stdout


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _unparsed(command: list[str], exc: ParseError) -> DriverError:
    return DriverError(
        f"'{' '.join(command)}' printed output that did not parse ({exc}); "
        f"check it with: {' '.join(command)} > out.txt; python -m nodeagent.parsers {os.path.basename(command[0])} out.txt"
    )


@dataclass
class _SimulatedInstance:
    entity_id: str
    flexnpu_id: str
    card_index: int
    core_percent: int
    memory_mib: int
    scenario: Scenario
    policy: str
    demand_percent: int = 0
    memory_used_mib: int = 0
    throttle_percent: int | None = None


class SimulatedDriver(NodeDriver):
    """An in-memory node (8 x 910B, 64 GiB each, by default) that enforces the FlexNPU limits.

    ``register`` refuses, with a ``ValueError`` that says why, what a real node would: a card
    that does not exist, a floor outside 1..100 (0..100 for best-effort), memory that is not a
    multiple of 128 MiB or does not fit the card's free memory, more instances than the card
    (16 development / 8 inference) or node (128 / 64) allows, floors summing over 100 on a card.
    ``set_demand`` says how much AI Core an instance wants now (and optionally the memory it
    uses); the AI Core each instance gets is computed with ``labs.domain.shares`` per card, and
    a card's AI Core use is their sum. Thread-safe.

    Each card reads like a 910B's on ``npu-smi``: about 90 W and 35 °C idle, up to about
    300 W and 65 °C with its AI Core fully in use (a slight spread between cards, as on a real
    server); ``versions()`` names an HDK 25.2.0 node (the FlexNPU guide's).
    """

    name = "simulated"
    registers_instances = True
    # An Atlas 800T A2 with HDK 25.2.0, as the FlexNPU guide requires.
    VERSIONS = NodeVersions(driver="25.2.0", firmware="7.7.0.6.236", npu_smi="25.2.0")
    IDLE_MILLIWATTS = 90_000
    BUSY_MILLIWATTS_PER_PERCENT = 2_100
    IDLE_CELSIUS = 35

    def __init__(
        self,
        cards: int = 8,
        chip_type: str = "Ascend910B",
        memory_mib: int = 65536,
        node_name: str = "sim-node",
        host_cpus: int = 192,
        host_memory_mib: int = 1024 * 1024,
        device_share: bool | None = True,
        die_ids: bool = True,
    ) -> None:
        if host_cpus < 1 or host_memory_mib < 1:
            raise ValueError(f"a host needs CPUs and memory, got {host_cpus} CPUs and {host_memory_mib} MiB")
        self.host_info = HostInfo(cpu_millicores=host_cpus * 1000, memory_mib=host_memory_mib)
        if cards < 1:
            raise ValueError(f"a node needs at least one card, got {cards}")
        if memory_mib <= 0 or memory_mib % MEMORY_GRANULE_MIB:
            raise ValueError(f"card memory must be a positive multiple of {MEMORY_GRANULE_MIB} MiB, got {memory_mib}")
        self.node_name = node_name
        self.chip_type = chip_type
        self.device_share_on = device_share
        self.memory_mib = memory_mib
        # ``die_ids=False``: none reported, as npu-smi shows none (the flexnpu-smi driver's cards).
        self._die_ids = [_die_id(node_name, index) if die_ids else "" for index in range(cards)]
        self._healthy = [True] * cards
        self._instances: dict[str, _SimulatedInstance] = {}
        self._registered = 0
        self._lock = threading.Lock()
        self._boot = 1

    def host(self) -> HostInfo:
        """An Atlas 800T A2's host by default: 192 cores (4 x Kunpeng 920) and 1 TiB."""
        return self.host_info

    def inventory(self) -> list[CardInfo]:
        with self._lock:
            delivered = self._delivered()
            return [
                CardInfo(
                    index=index,
                    die_id=die_id,
                    chip_type=self.chip_type,
                    memory_total_mib=self.memory_mib,
                    memory_used_mib=sum(i.memory_used_mib for i in self._on_card(index)),
                    aicore_percent=(busy := sum(delivered[i.entity_id] for i in self._on_card(index))),
                    healthy=self._healthy[index],
                    power_milliwatts=self.IDLE_MILLIWATTS + 300 * (index % 4) + self.BUSY_MILLIWATTS_PER_PERCENT * busy,
                    temperature_celsius=self.IDLE_CELSIUS + index % 3 + (30 * busy) // 100,
                )
                for index, die_id in enumerate(self._die_ids)
            ]

    def versions(self) -> NodeVersions:
        return self.VERSIONS

    def boot_id(self) -> str:
        with self._lock:
            return hashlib.sha256(f"{self.node_name}/boot/{self._boot}".encode()).hexdigest()[:32]

    def reboot(self) -> None:
        """Restart the simulated node: a new boot id, and no instance registered any more."""
        with self._lock:
            self._boot += 1
            self._instances.clear()

    def device_share(self) -> bool | None:
        return self.device_share_on

    def instances(self) -> list[InstanceInfo]:
        with self._lock:
            delivered = self._delivered()
            return [_info(i, delivered[i.entity_id]) for i in self._instances.values()]

    def unregister(self, entity_id: str) -> bool:
        with self._lock:
            return self._instances.pop(entity_id, None) is not None

    def register(
        self,
        entity_id: str,
        card_index: int,
        core_percent: int,
        memory_mib: int,
        scenario: str = "development",
        policy: str = "elastic",
    ) -> InstanceInfo:
        if not isinstance(entity_id, str) or not IDENTIFIER.fullmatch(entity_id):
            raise ValueError("entity_id must be 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
        for field, value in (("card_index", card_index), ("core_percent", core_percent), ("memory_mib", memory_mib)):
            _require_int(field, value)
        if scenario not in (s.value for s in Scenario):
            raise ValueError(f"scenario must be one of {', '.join(s.value for s in Scenario)}, got {scenario!r}")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        lowest = 0 if policy == "best-effort" else 1
        if not lowest <= core_percent <= 100:
            raise ValueError(f"core_percent must be {lowest}..100 with the {policy} policy, got {core_percent}")
        if memory_mib <= 0 or memory_mib % MEMORY_GRANULE_MIB:
            raise ValueError(f"memory_mib must be a positive multiple of {MEMORY_GRANULE_MIB} MiB, got {memory_mib}")
        with self._lock:
            if not 0 <= card_index < len(self._die_ids):
                raise ValueError(f"card {card_index} does not exist: this node has cards 0..{len(self._die_ids) - 1}")
            if entity_id in self._instances:
                existing = self._instances[entity_id]
                raise DuplicateInstance(f"instance {entity_id} is already registered (card {existing.card_index})")
            self._check_room(card_index, core_percent, memory_mib, Scenario(scenario))
            self._registered += 1
            instance = _SimulatedInstance(
                entity_id, str(self._registered), card_index, core_percent, memory_mib, Scenario(scenario), policy
            )
            self._instances[entity_id] = instance
            return _info(instance, self._delivered()[entity_id])

    def set_demand(self, entity_id: str, demand_percent: int, memory_used_mib: int | None = None) -> InstanceInfo:
        _require_int("demand_percent", demand_percent)
        if not 0 <= demand_percent <= 100:
            raise ValueError(f"demand_percent must be 0..100, got {demand_percent}")
        if memory_used_mib is not None:
            _require_int("memory_used_mib", memory_used_mib)
        with self._lock:
            instance = self._instances.get(entity_id)
            if instance is None:
                raise UnknownInstance(f"no instance {entity_id}")
            if memory_used_mib is not None and not 0 <= memory_used_mib <= instance.memory_mib:
                raise ValueError(f"memory_used_mib must be 0..{instance.memory_mib} (the instance's cap), got {memory_used_mib}")
            instance.demand_percent = demand_percent
            if memory_used_mib is not None:
                instance.memory_used_mib = memory_used_mib
            return _info(instance, self._delivered()[entity_id])

    def throttle(self, entity_id: str, delivered_percent: int | None) -> None:
        """Fault injection: deliver at most this much AI Core to the instance, whatever its floor
        (a card that breaks its guarantees); ``None`` lifts it."""
        with self._lock:
            instance = self._instances.get(entity_id)
            if instance is None:
                raise UnknownInstance(f"no instance {entity_id}")
            instance.throttle_percent = delivered_percent

    def set_card_health(self, card_index: int, healthy: bool) -> None:
        """Fault injection: report the card healthy or not."""
        with self._lock:
            self._healthy[card_index] = healthy

    def _check_room(self, card_index: int, core_percent: int, memory_mib: int, scenario: Scenario) -> None:
        on_card = self._on_card(card_index)
        free_mib = self.memory_mib - sum(i.memory_mib for i in on_card)
        if memory_mib > free_mib:
            raise ValueError(f"card {card_index} has {free_mib} MiB of memory free, the instance needs {memory_mib} MiB")
        free_core = 100 - sum(i.core_percent for i in on_card)
        if core_percent > free_core:
            raise ValueError(f"card {card_index} has {free_core} % of AI Core unguaranteed, the instance needs {core_percent} %")
        card_cap = min(CARD_INSTANCE_CAP[s] for s in {scenario, *(i.scenario for i in on_card)})
        if len(on_card) + 1 > card_cap:
            raise ValueError(f"card {card_index} already holds {len(on_card)} instance(s), at most {card_cap} in its scenario(s)")
        node_cap = min(NODE_INSTANCE_CAP[s] for s in {scenario, *(i.scenario for i in self._instances.values())})
        if len(self._instances) + 1 > node_cap:
            raise ValueError(f"the node already holds {len(self._instances)} instance(s), at most {node_cap} in its scenario(s)")

    def _on_card(self, card_index: int) -> list[_SimulatedInstance]:
        return [i for i in self._instances.values() if i.card_index == card_index]

    def _delivered(self) -> dict[str, int]:
        delivered: dict[str, int] = {}
        for index in range(len(self._die_ids)):
            demands = [ShareDemand(i.entity_id, i.core_percent, i.demand_percent, i.policy) for i in self._on_card(index)]
            delivered.update(delivered_shares(demands))  # type: ignore[arg-type]
        for instance in self._instances.values():
            if instance.throttle_percent is not None:
                delivered[instance.entity_id] = min(delivered[instance.entity_id], instance.throttle_percent)
        return delivered


def _info(instance: _SimulatedInstance, aicore_percent: int) -> InstanceInfo:
    return InstanceInfo(
        entity_id=instance.entity_id,
        flexnpu_id=instance.flexnpu_id,
        card_index=instance.card_index,
        core_percent=instance.core_percent,
        memory_mib=instance.memory_mib,
        memory_used_mib=instance.memory_used_mib,
        aicore_percent=aicore_percent,
        demand_percent=instance.demand_percent,
    )


def _require_int(field: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{field} must be an integer, got {value!r}")


def _die_id(node_name: str, index: int) -> str:
    """A stable die ID in the openFuyao style (five groups of eight hex digits) for a simulated card."""
    digest = hashlib.sha256(f"{node_name}/{index}".encode()).hexdigest().upper()
    return "-".join(digest[n : n + 8] for n in range(0, 40, 8))
