"""Node readiness per device profile, on the real control plane.

The portal reads each NPU node's object through its own ServiceAccount (deploy/base's RBAC:
nodes, get): a vNPU node without the ``huawei.com/vnpu=ready`` label the openFuyao guide has an
operator set, or whose device plugin advertises zero of a ``huawei.com/vnpu-*`` resource, is not
ready, and the allocation pass places nothing there; once the label is set, the next sync makes
it ready and the waiting session is placed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.nodes import PROFILE_LABEL
from labs.devcluster.portal import portal_token
from labs.drivers import get_driver
from labs.drivers.kubernetes.profiles import HOSTNAME_LABEL, VNPUProfile
from labs.models import LabSession, Node
from labs.services.agents import node_inventory_sync
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from nodeagent.wire import VersionsReport
from tests.factories import course_with_students, node_with_cards
from tests.kube.conftest import portal_driver_config
from tests.reconcile.conftest import TOKEN, RunningAgent

pytestmark = pytest.mark.kube

VNPU_CAPACITY = {VNPUProfile.NUMBER: "160", VNPUProfile.CORES: "800", VNPUProfile.MEMORY: "256", "pods": "110"}


class VNPUNodes:
    """Nodes made for one test (no kubelet: their status is what the test posts), each with a Node row and a vNPU agent."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.names: list[str] = []
        self.agents: list[RunningAgent] = []

    def add(self, *, labels: dict[str, str], capacity: dict[str, str]) -> Node:
        name = f"t-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        all_labels = {HOSTNAME_LABEL: name, PROFILE_LABEL: "vnpu", **labels}
        self.core.create_node({"metadata": {"name": name, "labels": all_labels}})
        self.core.patch_node_status(name, {"status": {"capacity": capacity, "allocatable": capacity}})
        agent = RunningAgent(name)
        agent.driver.chip_type = "Ascend910B4"
        agent.driver.VERSIONS = VersionsReport(driver="25.5.0", firmware="7.7.0.6.236", npu_smi="25.5.0")
        self.agents.append(agent)
        node = node_with_cards(name=name)
        node.agent_url = agent.url
        node.save(update_fields=["agent_url"])
        return node

    def close(self) -> None:
        for agent in self.agents:
            agent.stop()
        for name in self.names:
            self.core.delete_node(name)


@pytest.fixture
def vnpu_nodes(deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any) -> Iterator[VNPUNodes]:
    pools = {f"{PROFILE_LABEL}=vnpu": "vnpu"}
    settings.LAB_DRIVER = portal_driver_config(deployed, portal_token(core), profile="flexnpu", pool_profiles=pools)
    settings.LAB_AGENT_TOKEN = TOKEN
    settings.LAB_AGENT_REGISTERS_INSTANCES = False
    get_driver.cache_clear()
    nodes = VNPUNodes(core)
    yield nodes
    nodes.close()
    get_driver.cache_clear()


def test_a_vnpu_node_without_the_ready_label_is_skipped_until_it_is_labelled(
    vnpu_nodes: VNPUNodes, core: client.CoreV1Api
) -> None:
    node = vnpu_nodes.add(labels={}, capacity=VNPU_CAPACITY)
    course, templates, students, _ = course_with_students(1)

    assert node_inventory_sync(node)
    node.refresh_from_db()
    assert node.readiness_code == "readiness.vnpu_label"
    session = session_launch(student=students[0], course=course, template=templates[0])
    assert allocation_pass().admitted == []
    assert LabSession.objects.get(pk=session.pk).state == "queued"

    core.patch_node(node.name, {"metadata": {"labels": {"huawei.com/vnpu": "ready"}}})
    assert node_inventory_sync(node)
    node.refresh_from_db()
    assert node.readiness_code == ""
    assert allocation_pass().admitted == [str(session.pk)]


def test_a_vnpu_node_advertising_zero_cores_is_skipped(vnpu_nodes: VNPUNodes) -> None:
    node = vnpu_nodes.add(labels={"huawei.com/vnpu": "ready"}, capacity={**VNPU_CAPACITY, VNPUProfile.CORES: "0"})
    course, templates, students, _ = course_with_students(1)

    assert node_inventory_sync(node)
    node.refresh_from_db()
    assert (node.readiness_code, node.readiness_params["resource"]) == ("readiness.resource_missing", VNPUProfile.CORES)
    session_launch(student=students[0], course=course, template=templates[0])
    assert allocation_pass().admitted == []
    assert list(LabSession.objects.values_list("state", flat=True)) == ["queued"]
