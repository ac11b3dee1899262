"""The inventory sync keeps each card's latest temperature, power and memory in use, and the
node's driver, firmware and npu-smi versions, as a real agent (simulated driver) reports them."""

from __future__ import annotations

from labs.models import Card, Node
from labs.services.agents import node_inventory_sync
from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from tests.agent.helpers import TOKEN as AGENT_TOKEN
from tests.agent.helpers import fake_cli, running


def test_each_card_keeps_its_latest_temperature_power_and_memory_in_use(world, agent):
    agent.driver.register("busy", card_index=3, core_percent=50, memory_mib=8192)
    agent.driver.set_demand("busy", 100, memory_used_mib=6144)

    assert node_inventory_sync(world["node"])

    reported = {c.index: c for c in agent.driver.inventory()}
    cards = Card.objects.filter(node=world["node"]).order_by("index")
    assert [(c.temperature_celsius, c.power_milliwatts, c.memory_used_mib) for c in cards] == [
        (reported[c.index].temperature_celsius, reported[c.index].power_milliwatts, reported[c.index].memory_used_mib)
        for c in cards
    ]
    busy, idle = cards.get(index=3), cards.get(index=4)
    assert busy.temperature_celsius > idle.temperature_celsius and busy.power_milliwatts > idle.power_milliwatts
    assert busy.memory_used_mib == 6144


def test_the_node_keeps_its_driver_firmware_and_npu_smi_versions(world, agent):
    assert node_inventory_sync(world["node"])

    node = Node.objects.get(pk=world["node"].pk)
    assert (node.driver_version, node.firmware_version, node.npu_smi_version) == ("25.2.0", "7.7.0.6.236", "25.2.0")


def test_an_npu_smi_node_stores_what_npu_smi_printed_and_none_where_it_printed_na(world, settings, tmp_path):
    settings.LAB_AGENT_TOKEN = AGENT_TOKEN
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", board="npu_smi_info_board_910b.txt")
    flexnpu = fake_cli(tmp_path / "bin", "flexnpu-smi", "flexnpu_smi_info_no_instances.txt")
    Card.objects.filter(node=world["node"]).update(temperature_celsius=40, power_milliwatts=95_000)
    with running(FlexnpuSmiDriver(binary=str(flexnpu.path), npu_smi=str(npu.path))) as server:
        Node.objects.filter(pk=world["node"].pk).update(agent_url=server.url)
        world["node"].refresh_from_db()
        assert node_inventory_sync(world["node"])

    cards = {c.index: c for c in Card.objects.filter(node=world["node"])}
    assert (cards[1].temperature_celsius, cards[1].power_milliwatts, cards[1].memory_used_mib) == (37, 251_700, 36211)
    assert (cards[6].temperature_celsius, cards[6].power_milliwatts) == (38, None)  # Power(W) NA
    node = Node.objects.get(pk=world["node"].pk)
    assert (node.driver_version, node.firmware_version, node.npu_smi_version) == ("24.1.rc3", "7.5.0.1.129", "24.1.rc3")
