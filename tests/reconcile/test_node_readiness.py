"""A node takes placements only while its device profile's preconditions hold: the inventory sync
reads them from the node's agent (npu-smi) and the cluster's node object, stores why a node is
not ready, and the allocation pass leaves such a node alone: a session waits, it is never placed
there to fail."""

from __future__ import annotations

import pytest

from labs.drivers import NodeStatus
from labs.models import Allocation, Card, LabSession, Node, RepairEvent
from labs.services.agents import node_inventory_sync
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.cards.simulated import SimulatedDriver
from nodeagent.wire import VersionsReport
from tests.agent.helpers import TOKEN as AGENT_TOKEN
from tests.agent.helpers import fake_cli, running

VNPU_RESOURCES = {"huawei.com/vnpu-number": 160, "huawei.com/vnpu-cores": 800, "huawei.com/vnpu-memory.1Gi": 512}
VNPU_READY = {"huawei.com/vnpu": "ready"}


@pytest.fixture
def cluster_driver(cluster_driver, world):
    """The simulator, whose node objects (``node_status_set``) outlive a test: the node's is taken away after it."""
    cluster_driver.node_status_forget(world["node"].name)
    yield cluster_driver
    cluster_driver.node_status_forget(world["node"].name)


def vnpu_agent(agent) -> None:
    """The agent's node as openFuyao vNPU wants it: 910B4 chips on HDK 25.5.0."""
    agent.driver.chip_type = "Ascend910B4"
    agent.driver.VERSIONS = VersionsReport(driver="25.5.0", firmware="7.7.0.6.236", npu_smi="25.5.0")


def readiness(node: Node) -> tuple[str, dict]:
    node.refresh_from_db()
    return node.readiness_code, node.readiness_params


def test_a_vnpu_node_without_the_ready_label_takes_no_session_until_it_is_labelled(world, agent, cluster_driver):
    node = world["node"]
    vnpu_agent(agent)
    cluster_driver.node_status_set(node.name, NodeStatus("vnpu", labels={}, resources=VNPU_RESOURCES))

    assert node_inventory_sync(node)
    assert readiness(node) == ("readiness.vnpu_label", {"label": "huawei.com/vnpu=ready"})
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    assert allocation_pass().admitted == []
    session.refresh_from_db()
    assert session.state == "queued" and not Allocation.objects.exists()

    cluster_driver.node_status_set(node.name, NodeStatus("vnpu", labels=VNPU_READY, resources=VNPU_RESOURCES))
    assert node_inventory_sync(node)
    assert readiness(node) == ("", {})
    assert allocation_pass().admitted == [str(session.pk)]
    assert list(RepairEvent.objects.filter(kind="node_readiness").values_list("message", flat=True).order_by("pk")) == [
        "not ready: not ready for vNPU: the node lacks the label huawei.com/vnpu=ready, which the openFuyao vNPU "
        "components are deployed by",
        "ready for its device profile",
    ]


def test_a_node_whose_device_plugin_advertises_zero_capacity_is_skipped(world, agent, cluster_driver):
    node = world["node"]
    vnpu_agent(agent)
    empty = {**VNPU_RESOURCES, "huawei.com/vnpu-memory.1Gi": 0}
    cluster_driver.node_status_set(node.name, NodeStatus("vnpu", labels=VNPU_READY, resources=empty))

    assert node_inventory_sync(node)

    code, params = readiness(node)
    assert (code, params["resource"]) == ("readiness.resource_missing", "huawei.com/vnpu-memory.1Gi")
    session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    assert list(LabSession.objects.values_list("state", flat=True)) == ["queued"]


def test_a_vnpu_node_with_device_share_off_or_a_910b3_is_not_ready(world, agent, cluster_driver):
    node = world["node"]
    vnpu_agent(agent)
    cluster_driver.node_status_set(node.name, NodeStatus("vnpu", labels=VNPU_READY, resources=VNPU_RESOURCES))
    agent.driver.device_share_on = False
    assert node_inventory_sync(node)
    assert readiness(node)[0] == "readiness.device_share_off"

    agent.driver.device_share_on = True
    agent.driver.chip_type = "Ascend910B3"
    assert node_inventory_sync(node)
    assert readiness(node) == (
        "readiness.chip_unsupported",
        {"chip": "Ascend910B3", "profile": "openFuyao vNPU", "supported": "Ascend310P3, Ascend910B4"},
    )


def test_a_node_the_cluster_does_not_know_is_not_ready(world, agent, cluster_driver):
    node = world["node"]
    cluster_driver.node_status_set(node.name, NodeStatus("flexnpu", exists=False))

    assert node_inventory_sync(node)

    assert readiness(node) == ("readiness.node_missing", {"node": node.name})


def test_a_flexnpu_node_below_hdk_25_2_0_is_not_ready_from_npu_smi_alone(world, settings, tmp_path, cluster_driver):
    settings.LAB_AGENT_TOKEN = AGENT_TOKEN
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", board="npu_smi_info_board_910b.txt")
    flexnpu = fake_cli(tmp_path / "bin", "flexnpu-smi", "flexnpu_smi_info_no_instances.txt")
    node = world["node"]
    with running(FlexnpuSmiDriver(binary=str(flexnpu.path), npu_smi=str(npu.path))) as server:
        Node.objects.filter(pk=node.pk).update(agent_url=server.url)
        node.refresh_from_db()
        assert node_inventory_sync(node)

    assert readiness(node) == (
        "readiness.driver_too_old",
        {"minimum": "25.2.0", "profile": "FlexNPU", "version": "24.1.rc3"},
    )


def test_a_flexnpu_node_of_the_simulated_agent_stays_ready(world, agent, cluster_driver):
    assert node_inventory_sync(world["node"])

    assert readiness(world["node"]) == ("", {})


def test_cards_without_a_die_id_get_the_one_the_vnpu_plugin_registered_on_the_node(world, settings, cluster_driver):
    settings.LAB_AGENT_TOKEN = AGENT_TOKEN
    node = world["node"]
    devices = tuple((f"DIE-{index:02d}", "Ascend910B4") for index in range(8))
    status = NodeStatus("vnpu", labels=VNPU_READY, resources=VNPU_RESOURCES, devices=devices)
    cluster_driver.node_status_set(node.name, status)
    with running(SimulatedDriver(node_name=node.name, chip_type="", die_ids=False)) as server:
        Node.objects.filter(pk=node.pk).update(agent_url=server.url)
        node.refresh_from_db()
        assert node_inventory_sync(node)

    cards = list(Card.objects.filter(node=node).order_by("index").values_list("die_id", "chip_type"))
    assert cards == [(f"DIE-{index:02d}", "Ascend910B4") for index in range(8)]
    assert readiness(node)[0] == "readiness.driver_too_old"  # the simulated HDK 25.2.0, not the chip
