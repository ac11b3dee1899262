"""The real scheduler places pods that name Volcano on the fake nodes' extended resources, and the simulator runs them."""

from __future__ import annotations

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.drivers.base import CardBinding
from labs.drivers.kubernetes.profiles import PROFILES, FlexNPUProfile, get_profile
from tests.kube.conftest import pod_manifest, wait_for

pytestmark = pytest.mark.kube

SHARE = CardBinding(
    node="unused", card_index=0, die_id="", chip_type="Ascend910B3", core_percent=25, memory_mib=8192, scenario="inference"
)


def _running(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod | None:
    pod = core.read_namespaced_pod(name, namespace)
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod if pod.status.phase == "Running" and ready else None


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_volcano_pod_runs_on_a_node_of_its_profile(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str, profile: str
) -> None:
    # The profile's resources and annotations, but not its node pin: the scheduler finds the node.
    device = get_profile(profile).render(SHARE)
    manifest = pod_manifest("lab", resources=device.resources)
    manifest["metadata"]["annotations"] = device.annotations
    core.create_namespaced_pod(namespace, manifest)

    pod = wait_for(f"the {profile} pod Running and Ready", lambda: _running(core, namespace, "lab"))

    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels["npu-lab.portal/device-profile"] == profile
    assert pod.status.host_ip == next(a.address for a in node.status.addresses if a.type == "InternalIP")
    assert pod.status.pod_ip
    assert {c.type: c.status for c in pod.status.conditions} == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    [container] = pod.status.container_statuses
    assert container.ready and container.started and container.state.running.started_at
    scheduled = wait_for(
        "the Scheduled event", lambda: core.list_namespaced_event(namespace, field_selector="reason=Scheduled").items
    )
    assert [event.reporting_component for event in scheduled] == ["volcano"]


def test_a_pod_larger_than_any_node_stays_pending_with_the_schedulers_reason(
    core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("too-big", resources={FlexNPUProfile.CORE: "900"}))

    events = wait_for(
        "a FailedScheduling event",
        lambda: core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items,
    )

    assert f"Insufficient {FlexNPUProfile.CORE}" in events[0].message
    assert events[0].reporting_component == "volcano"
    pod = wait_for("the pod's condition", lambda: (p := core.read_namespaced_pod("too-big", namespace)).status.conditions and p)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name
    [condition] = pod.status.conditions
    assert (condition.type, condition.status, condition.reason) == ("PodScheduled", "False", "Unschedulable")


def test_a_pod_for_the_default_scheduler_runs_too(core: client.CoreV1Api, namespace: str) -> None:
    manifest = pod_manifest("plain", resources={"cpu": "100m"})
    del manifest["spec"]["schedulerName"]
    core.create_namespaced_pod(namespace, manifest)

    pod = wait_for("the pod Running and Ready", lambda: _running(core, namespace, "plain"))

    assert pod.spec.scheduler_name == "default-scheduler"
