"""The agent's wire format: what ``GET /healthz``, ``/v1/inventory`` and ``/v1/instances`` carry.

One definition for both ends. The agent's card drivers return these records and its server
sends them as ``to_json(record)``; the portal reads them back with ``health_from_json``,
``inventory_from_json``, ``instance_from_json`` and ``instances_from_json`` (through
``nodeagent.client``), which check every field's type (a ``bool`` is not an ``int``) and raise
``MalformedReport`` naming the field. Standard library only: the portal imports this module,
and it imports nothing of the portal.

Agents are upgraded node by node, so the portal reads older ones: a field marked
``ADDED_LATER`` in its metadata may be absent (an agent from before it) and reads as its
default; every other field must be there. In the inventory, ``host`` absent or ``null`` is an
agent from before host figures, ``versions`` absent or ``null`` one from before versions (all
``""``), and a ``boot_id`` that is not a string reads as ``""``.

Amounts are integers with the unit in the name: ``core_percent`` is the AI Core floor in
percent of one card, ``aicore_percent`` the AI Core in use now, ``*_mib`` memory in MiB; a
card's ``power_milliwatts`` (0..``MAX_CARD_MILLIWATTS``) and ``temperature_celsius``
(0..``MAX_CARD_CELSIUS``) are what ``npu-smi`` reads, ``None`` when not reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Beyond these a reading is not a card's (an NPU draws a few hundred watts and shuts down near 100 °C).
MAX_CARD_MILLIWATTS = 10_000_000
MAX_CARD_CELSIUS = 300

# Field metadata: an older agent does not send the field (it reads as the default).
ADDED_LATER = "added_later"
# Field metadata: the highest value the portal accepts (and 0 the lowest); None always passes.
HIGHEST = "highest"


class MalformedReport(ValueError):
    """What an agent sent does not fit the wire format; ``str(exc)`` names the field and its value."""


def _card_reading(highest: int) -> Any:
    """A card's health reading: ``None`` when not reported (``NA``, or an agent from before card health)."""
    return field(default=None, metadata={ADDED_LATER: True, HIGHEST: highest})


@dataclass(frozen=True)
class HealthReport:
    ok: bool
    node: str
    driver: str


@dataclass(frozen=True)
class CardReport:
    """One card (an NPU chip) of the node, by index."""

    index: int
    die_id: str
    chip_type: str
    memory_total_mib: int
    memory_used_mib: int
    aicore_percent: int
    healthy: bool
    power_milliwatts: int | None = _card_reading(MAX_CARD_MILLIWATTS)
    temperature_celsius: int | None = _card_reading(MAX_CARD_CELSIUS)


@dataclass(frozen=True)
class InstanceReport:
    """One FlexNPU instance on one card; an instance on several cards is one report per card.

    ``demand_percent`` is what the instance wants now: ``None`` on a real node (its workload
    makes the demand, which ``flexnpu-smi`` does not show); always sent, even as ``null``."""

    entity_id: str
    flexnpu_id: str
    card_index: int
    core_percent: int
    memory_mib: int
    memory_used_mib: int
    aicore_percent: int
    demand_percent: int | None = None


@dataclass(frozen=True)
class HostReport:
    """The node's host CPU (millicores) and memory (MiB), before any reserve."""

    cpu_millicores: int
    memory_mib: int


@dataclass(frozen=True)
class VersionsReport:
    """What the node runs: the NPU driver (``npu-smi info``'s banner, "Version:"), the card
    firmware (``npu-smi info -t board``) and ``npu-smi`` itself; ``""`` for one not known."""

    driver: str = ""
    firmware: str = ""
    npu_smi: str = ""


@dataclass(frozen=True, kw_only=True)
class InventoryReport:
    """``GET /v1/inventory``: the node's cards, its host, its versions, its boot and its device-share mode.

    ``boot_id`` is the host's boot id (a new one means the node restarted; at most 64
    characters); ``device_share`` is whether every chip is in device-share mode, ``None`` when
    the node cannot tell."""

    node: str = field(default="", metadata={ADDED_LATER: True})
    cards: list[CardReport]
    host: HostReport | None = field(default=None, metadata={ADDED_LATER: True})
    versions: VersionsReport = field(default_factory=VersionsReport, metadata={ADDED_LATER: True})
    boot_id: str = field(default="", metadata={ADDED_LATER: True})
    device_share: bool | None = field(default=None, metadata={ADDED_LATER: True})


def to_json(record: Any) -> dict[str, Any]:
    """The JSON object the agent sends for ``record`` (nested records and lists included)."""
    return asdict(record)


def health_from_json(payload: Any) -> HealthReport:
    return record_from_json(HealthReport, payload)


def instance_from_json(payload: Any) -> InstanceReport:
    return record_from_json(InstanceReport, payload)


def instances_from_json(payload: Any) -> list[InstanceReport]:
    """``GET /v1/instances``: ``{"instances": [...]}``."""
    return [instance_from_json(instance) for instance in _list(payload, "instances")]


def inventory_from_json(payload: Any) -> InventoryReport:
    """``GET /v1/inventory``, from an agent of any age (module docstring)."""
    cards = [record_from_json(CardReport, card) for card in _list(payload, "cards")]
    node = payload.get("node", "")
    if not isinstance(node, str):
        raise MalformedReport(f"InventoryReport.node is {node!r}")
    host = payload.get("host")
    versions = payload.get("versions")
    boot_id = payload.get("boot_id")
    device_share = payload.get("device_share")
    if device_share not in (None, True, False) or isinstance(device_share, int) and not isinstance(device_share, bool):
        raise MalformedReport(f"device_share is {device_share!r}")
    return InventoryReport(
        node=node,
        cards=cards,
        host=None if host is None else record_from_json(HostReport, host),
        versions=VersionsReport() if versions is None else record_from_json(VersionsReport, versions),
        boot_id=boot_id[:64] if isinstance(boot_id, str) else "",
        device_share=device_share,
    )


_TYPES: dict[str, type | tuple[type, ...]] = {"int": int, "str": str, "bool": bool, "int | None": (int, type(None))}


def record_from_json(cls: type, payload: Any) -> Any:
    """``cls`` (a record of flat fields) from a JSON object, every field present with the right
    type, unless ``ADDED_LATER``, and within its ``HIGHEST``; ``MalformedReport`` otherwise."""
    if not isinstance(payload, dict):
        raise MalformedReport(f"expected a {cls.__name__} object")
    values = {}
    for spec in fields(cls):
        if spec.name not in payload and spec.metadata.get(ADDED_LATER):
            continue
        value = payload.get(spec.name)
        expected = _TYPES[str(spec.type)]
        wrong_bool = isinstance(value, bool) and expected is not bool
        if spec.name not in payload or not isinstance(value, expected) or wrong_bool:
            raise MalformedReport(f"{cls.__name__}.{spec.name} is {value!r}")
        values[spec.name] = value
    for spec in fields(cls):
        highest, value = spec.metadata.get(HIGHEST), values.get(spec.name)
        if highest is not None and value is not None and not 0 <= value <= highest:
            raise MalformedReport(f"{cls.__name__}.{spec.name} is {value}, outside 0..{highest}")
    return cls(**values)


def _list(payload: Any, key: str) -> list[Any]:
    items = payload.get(key) if isinstance(payload, dict) else None
    if not isinstance(items, list):
        raise MalformedReport(f"no {key!r} list")
    return items
