"""Residual instances by the vendor's rule, on the real control plane.

A researcher's job, a pod made by another ServiceAccount in a namespace of its own, runs on the
FlexNPU node beside the portal's labs; FlexNPU registers its instance under the pod's UID. The
node reconciler reads the node's pods through the portal's ServiceAccount (deploy/base's RBAC)
and keeps that instance, while an entity-id with no pod anywhere is unregistered.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import portal_token
from labs.drivers import get_driver
from labs.drivers.base import CardBinding
from labs.drivers.kubernetes.profiles import HOSTNAME_LABEL, get_profile
from labs.models import RepairEvent
from labs.services.reconcile import reconcile
from tests.factories import node_with_cards
from tests.kube.conftest import pod_manifest, portal_driver_config, wait_for
from tests.reconcile.conftest import TOKEN, RunningAgent

pytestmark = pytest.mark.kube

SHARE = CardBinding(
    node="unused", card_index=0, die_id="", chip_type="Ascend910B3", core_percent=25, memory_mib=8192, scenario="development"
)


@pytest.fixture
def flexnpu_node(deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any) -> Iterator[tuple[str, RunningAgent]]:
    """The FlexNPU node as the portal's Node, its (simulated) agent, and the portal's driver with deploy/'s token."""
    name = next(node.name for node in deployed.nodes if node.profile == "flexnpu")
    settings.LAB_DRIVER = portal_driver_config(deployed, portal_token(core), profile="flexnpu")
    settings.LAB_AGENT_TOKEN = TOKEN
    settings.LAB_AGENT_REGISTERS_INSTANCES = False  # the device plugin registers instances here
    get_driver.cache_clear()
    agent = RunningAgent(name)
    node = node_with_cards(name=name)
    node.agent_url = agent.url
    node.save(update_fields=["agent_url"])
    yield name, agent
    agent.stop()
    get_driver.cache_clear()


def researcher_token(deployed: DevCluster, core: client.CoreV1Api, namespace: str) -> str:
    """A token of ServiceAccount ``researcher``, allowed to make and read pods in ``namespace`` only."""
    rbac = client.RbacAuthorizationV1Api(deployed.api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "researcher"}})
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "jobs"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "researcher-runs-jobs"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
            "subjects": [{"kind": "ServiceAccount", "name": "researcher", "namespace": namespace}],
        },
    )
    request = core.create_namespaced_service_account_token("researcher", namespace, {"spec": {"expirationSeconds": 600}})
    return request.status.token


def test_a_foreign_pod_on_the_node_keeps_its_instance_and_a_residual_is_unregistered(
    deployed: DevCluster, core: client.CoreV1Api, namespace: str, flexnpu_node: tuple[str, RunningAgent], settings: Any
) -> None:
    settings.LAB_RESIDUAL_GRACE_SECONDS = 0
    node, agent = flexnpu_node
    job = pod_manifest("train-0", resources=get_profile("flexnpu").render(SHARE).resources, nodeSelector={HOSTNAME_LABEL: node})
    with deployed.token_client(researcher_token(deployed, core, namespace)) as api:
        made = client.CoreV1Api(api).create_namespaced_pod(namespace, job)
    wait_for("the researcher's pod Running", lambda: core.read_namespaced_pod("train-0", namespace).status.phase == "Running")
    foreign = made.metadata.uid
    residual = str(uuid.uuid4())  # a force-deleted pod's leftover: no pod has this UID
    agent.driver.register(entity_id=foreign, card_index=1, core_percent=25, memory_mib=8192)
    agent.driver.register(entity_id=residual, card_index=2, core_percent=10, memory_mib=4096)

    report = reconcile()

    assert (report.foreign_seen, report.residuals_unregistered, report.pods_unknown) == (1, 1, [])
    assert {i.entity_id for i in agent.driver.instances()} == {foreign}
    event = RepairEvent.objects.get(kind="foreign_instance")
    assert event.entity_id == foreign and f"{namespace}/train-0" in event.message
    assert reconcile().foreign_seen == 0  # reported once
    assert {i.entity_id for i in agent.driver.instances()} == {foreign}


def test_the_pods_on_a_node_are_read_as_metadata_only(deployed: DevCluster, flexnpu_node: tuple[str, RunningAgent]) -> None:
    node, _ = flexnpu_node
    answer = get_driver().metadata_api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}", _request_timeout=10)

    listing = json.loads(answer.data)

    assert listing["kind"] == "PartialObjectMetadataList"
    assert all(set(item) <= {"kind", "apiVersion", "metadata"} for item in listing.get("items") or [])
