"""The simulated driver: an in-memory node that enforces the FlexNPU limits (tests, the demo, the simulator)."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from labs.domain.shares import POLICIES, ShareDemand, delivered_shares
from labs.domain.units import CARD_INSTANCE_CAP, MEMORY_GRANULE_MIB, NODE_INSTANCE_CAP, Scenario
from nodeagent.cards.base import DuplicateInstance, NodeDriver, UnknownInstance
from nodeagent.parsers.text import IDENTIFIER
from nodeagent.wire import CardReport, HostReport, InstanceReport, VersionsReport


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
    VERSIONS = VersionsReport(driver="25.2.0", firmware="7.7.0.6.236", npu_smi="25.2.0")
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
        self.host_info = HostReport(cpu_millicores=host_cpus * 1000, memory_mib=host_memory_mib)
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

    def host(self) -> HostReport:
        """An Atlas 800T A2's host by default: 192 cores (4 x Kunpeng 920) and 1 TiB."""
        return self.host_info

    def inventory(self) -> list[CardReport]:
        with self._lock:
            delivered = self._delivered()
            return [
                CardReport(
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

    def versions(self) -> VersionsReport:
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

    def instances(self) -> list[InstanceReport]:
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
    ) -> InstanceReport:
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

    def set_demand(self, entity_id: str, demand_percent: int, memory_used_mib: int | None = None) -> InstanceReport:
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


def _info(instance: _SimulatedInstance, aicore_percent: int) -> InstanceReport:
    return InstanceReport(
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
