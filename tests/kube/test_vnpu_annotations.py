"""openFuyao vNPU details on the real control plane: the card a share is placed on is pinned by the
die id and type the device plugin registered on the node (``huawei.com/node-vnpu-register``) when
the agent sees no die id, and the API server and the scheduler take the pod with hard mode's
AI CPU level and the node- and device-level scheduling policies the profile is given."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.nodes import PROFILE_LABEL
from labs.devcluster.portal import portal_token
from labs.drivers import get_driver
from labs.drivers.base import CardBinding
from labs.drivers.kubernetes.builders import pod_name
from labs.drivers.kubernetes.profiles import VNPU_REGISTER_ANNOTATION, VNPUProfile
from labs.models import Card, Node
from labs.services.agents import node_inventory_sync
from nodeagent.cards.simulated import SimulatedDriver
from nodeagent.wire import VersionsReport
from tests.agent.helpers import TOKEN, running
from tests.factories import node_with_cards
from tests.kube.conftest import LabCourse, lab_spec, make_lab_course, portal_driver_config, wait_for

pytestmark = pytest.mark.kube

DIE_IDS = [f"37E96E64-20C10A5A-8C747124-6E78030A-BF0030{index:02d}" for index in range(8)]
REGISTER = ":".join(f"{index};{die};32768;100;NPU-ASCEND-910B4" for index, die in enumerate(DIE_IDS))
POOL = {"profile": "vnpu", "mode": "hard", "node_policy": "spread", "device_policy": "binpack"}


@pytest.fixture
def vnpu_course(deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any) -> Iterator[LabCourse]:
    """The vNPU node labelled ready and carrying its device plugin's register annotation, a course on it."""
    settings.LAB_DRIVER = portal_driver_config(
        deployed, portal_token(core), profile="flexnpu", pool_profiles={f"{PROFILE_LABEL}=vnpu": POOL}
    )
    settings.LAB_AGENT_TOKEN = TOKEN
    get_driver.cache_clear()
    course = make_lab_course(deployed, settings, profile="vnpu")
    patch = {"labels": {"huawei.com/vnpu": "ready"}, "annotations": {VNPU_REGISTER_ANNOTATION: REGISTER}}
    core.patch_node(course.node, {"metadata": patch})
    yield course
    undo = {"labels": {"huawei.com/vnpu": None}, "annotations": {VNPU_REGISTER_ANNOTATION: None}}
    core.patch_node(course.node, {"metadata": undo})
    core.delete_namespace(course.namespace)
    get_driver.cache_clear()


def test_a_card_the_agent_sees_no_die_id_of_is_pinned_by_the_registered_one(
    vnpu_course: LabCourse, core: client.CoreV1Api
) -> None:
    agent = SimulatedDriver(cards=8, node_name=vnpu_course.node, chip_type="Ascend910B4", memory_mib=32768, die_ids=False)
    agent.VERSIONS = VersionsReport(driver="25.5.0", firmware="7.7.0.6.236", npu_smi="25.5.0")
    node = node_with_cards(name=vnpu_course.node, memory_mib=32768)
    with running(agent) as server:
        # The portal's node carries the pool's label, as the operator sets it in the admin.
        Node.objects.filter(pk=node.pk).update(agent_url=server.url, labels={PROFILE_LABEL: "vnpu"})
        node.refresh_from_db()
        assert node_inventory_sync(node)
    node.refresh_from_db()
    assert (node.readiness_code, node.card_truth) == ("", "pinned")
    card = Card.objects.get(node=node, index=3)
    assert (card.die_id, card.chip_type) == (DIE_IDS[3], "Ascend910B4")

    spec = lab_spec(vnpu_course, memory_mib=8192)
    binding = CardBinding(
        node=node.name,
        card_index=card.index,
        die_id=card.die_id,
        chip_type=card.chip_type,
        core_percent=25,
        memory_mib=8192,
        scenario="development",
        card_memory_mib=card.memory_mib,
        node_labels=((PROFILE_LABEL, "vnpu"),),
    )
    spec = replace(spec, card=binding)
    driver = get_driver()
    try:
        driver.create(spec)
        pod = core.read_namespaced_pod(pod_name(spec.session_id), vnpu_course.namespace)
        assert {k: v for k, v in pod.metadata.annotations.items() if k.startswith("huawei.com/")} == {
            VNPUProfile.MODE: "hard",
            VNPUProfile.HARD_AICPU_LEVEL: "low",
            VNPUProfile.NODE_POLICY: "spread",
            VNPUProfile.DEVICE_POLICY: "binpack",
            VNPUProfile.DIE_ID: DIE_IDS[3],
            VNPUProfile.NPU_TYPE: "NPU-ASCEND-910B4",
        }
        wait_for(
            "the vNPU lab Running on its node",
            lambda: (
                (p := core.read_namespaced_pod(pod.metadata.name, vnpu_course.namespace)).status.phase == "Running"
                and p.spec.node_name == node.name
            ),
            timeout=60,
        )
    finally:
        driver.delete(spec.session_id)
