"""The wire format is one definition: what the agent sends is what the portal reads, field for field."""

from __future__ import annotations

from dataclasses import MISSING, fields

import pytest

from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.client import AgentClient
from nodeagent.wire import (
    ADDED_LATER,
    CardReport,
    HealthReport,
    HostReport,
    InstanceReport,
    InventoryReport,
    MalformedReport,
    VersionsReport,
    health_from_json,
    instance_from_json,
    inventory_from_json,
    record_from_json,
    to_json,
)
from tests.agent.helpers import TOKEN, call, fake_cli, running

RECORDS = (HealthReport, CardReport, InstanceReport, HostReport, VersionsReport)


def field_names(record: type) -> set[str]:
    return {spec.name for spec in fields(record)}


def sent_and_read(server) -> tuple[dict, InventoryReport]:
    """The inventory as the agent sent it (raw JSON) and as the portal's client read it."""
    return call(server, "GET", "/v1/inventory").json(), AgentClient(server.url, TOKEN).inventory_report()


def test_an_inventory_round_trips_from_the_agent_through_json_to_the_portal(agent, simulated):
    simulated.register("pod-1", 2, 25, 8192)
    simulated.set_demand("pod-1", 60, memory_used_mib=1024)

    sent, read = sent_and_read(agent)

    assert to_json(read) == sent
    assert set(sent) == field_names(InventoryReport)
    assert set(sent["cards"][0]) == field_names(CardReport)
    assert set(sent["host"]) == field_names(HostReport)
    assert set(sent["versions"]) == field_names(VersionsReport)
    # Every field that has a default carries another value here, so a field the portal does
    # not read (and leaves at its default) cannot pass for one it read.
    for value, record in ((read, InventoryReport), (read.cards[0], CardReport), (read.versions, VersionsReport)):
        for spec in fields(record):
            default = spec.default_factory() if spec.default_factory is not MISSING else spec.default
            assert getattr(value, spec.name) != default, f"{record.__name__}.{spec.name} is its default: the round trip misses it"


def test_instances_and_health_round_trip_from_the_agent_through_json_to_the_portal(agent, simulated):
    instance = {"entity_id": "pod-1", "card_index": 2, "core_percent": 25, "memory_mib": 8192}
    registered = call(agent, "POST", "/v1/instances", instance)
    demand = call(agent, "POST", "/v1/instances/pod-1/demand", {"demand_percent": 60, "memory_used_mib": 1024})
    listed = call(agent, "GET", "/v1/instances").json()["instances"]
    health = call(agent, "GET", "/healthz").json()

    for sent in (registered.json(), demand.json(), *listed):
        assert set(sent) == field_names(InstanceReport)
        assert to_json(instance_from_json(sent)) == sent
    assert AgentClient(agent.url, TOKEN).instances() == [instance_from_json(sent) for sent in listed]
    assert to_json(health_from_json(health)) == health
    assert set(health) == field_names(HealthReport)


def test_a_real_nodes_inventory_round_trips_with_its_unreported_readings(tmp_path):
    board, share = "npu_smi_info_board_910b.txt", "npu_smi_device_share_on.txt"
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", board=board, device_share=share)
    flexnpu = fake_cli(tmp_path / "bin", "flexnpu-smi", "flexnpu_smi_info_several.txt")
    with running(FlexnpuSmiDriver(binary=str(flexnpu.path), npu_smi=str(npu.path))) as server:
        sent, read = sent_and_read(server)
        instances = call(server, "GET", "/v1/instances").json()["instances"]

    assert to_json(read) == sent
    assert any(card.power_milliwatts is None for card in read.cards)  # NA: sent as null, read as None
    assert [to_json(instance_from_json(sent)) for sent in instances] == instances


@pytest.mark.parametrize("record", RECORDS, ids=lambda record: record.__name__)
def test_every_field_an_older_agent_may_omit_is_marked_and_every_other_one_is_required(agent, simulated, record):
    simulated.register("pod-1", 2, 25, 8192)
    inventory = call(agent, "GET", "/v1/inventory").json()
    sent = {
        HealthReport: call(agent, "GET", "/healthz").json(),
        CardReport: inventory["cards"][0],
        InstanceReport: call(agent, "GET", "/v1/instances").json()["instances"][0],
        HostReport: inventory["host"],
        VersionsReport: inventory["versions"],
    }[record]

    for spec in fields(record):
        without = {name: value for name, value in sent.items() if name != spec.name}
        if spec.metadata.get(ADDED_LATER):
            assert getattr(record_from_json(record, without), spec.name) == spec.default
        else:
            with pytest.raises(MalformedReport, match=rf"^{record.__name__}\.{spec.name} is None$"):
                record_from_json(record, without)


def test_an_inventory_from_the_first_agents_reads_with_every_later_field_at_its_default():
    card = {"index": 0, "die_id": "", "chip_type": "Ascend910B3", "memory_total_mib": 65536}
    card |= {"memory_used_mib": 0, "aicore_percent": 0, "healthy": True}

    read = inventory_from_json({"cards": [card]})

    assert read == InventoryReport(cards=[CardReport(**card)])
    assert (read.node, read.host, read.versions, read.boot_id, read.device_share) == ("", None, VersionsReport(), "", None)
