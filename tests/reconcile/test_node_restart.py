"""A node restart seen in its agent's report: the host's boot id changes; the node's labs wait until
the agent reports healthy cards again (the CCE FlexNPU guide: after an unexpected restart NPU pods
may show failed because the NPUs are reported late)."""

from __future__ import annotations

from labs.models import Node, RepairEvent
from labs.services.agents import node_inventory_sync


def _node(world) -> Node:
    return Node.objects.get(pk=world["node"].pk)


def test_the_first_boot_id_an_agent_reports_is_only_recorded(world, agent):
    assert node_inventory_sync(world["node"])

    node = _node(world)
    assert node.agent_boot_id == agent.driver.boot_id() and node.rebooted_at is None


def test_a_new_boot_id_from_the_agent_is_a_restart_whose_npus_are_back_once_healthy_cards_are_reported(world, agent):
    node_inventory_sync(world["node"])
    agent.driver.reboot()
    for index in range(8):
        agent.driver.set_card_health(index, False)  # the device not reported yet

    assert node_inventory_sync(world["node"])
    node = _node(world)
    assert node.agent_boot_id == agent.driver.boot_id() and node.rebooted_at is not None and node.devices_back_at is None

    agent.driver.set_card_health(0, True)
    node_inventory_sync(world["node"])
    node_inventory_sync(world["node"])

    back = _node(world)
    assert back.rebooted_at == node.rebooted_at and back.devices_back_at >= node.rebooted_at
    assert RepairEvent.objects.filter(kind=RepairEvent.Kind.NODE_REBOOTED, node=node).count() == 1
    assert RepairEvent.objects.filter(kind=RepairEvent.Kind.NODE_DEVICES_BACK, node=node).count() == 1

