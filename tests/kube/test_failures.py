"""The simulator's failures as a kubelet would report them: image pull, OOMKilled, a lost node."""

from __future__ import annotations

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.simulator import FAILURE_ANNOTATION
from tests.kube.conftest import pod_manifest, wait_for

pytestmark = pytest.mark.kube


def _waiting_reason(core: client.CoreV1Api, namespace: str, name: str) -> str:
    statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
    return statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else ""


def test_an_image_pull_failure_shows_in_the_status_and_events(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    devcluster.simulator.fail_pod(namespace, "lab", "ErrImagePull")
    core.create_namespaced_pod(namespace, pod_manifest("lab"))

    wait_for("ErrImagePull", lambda: _waiting_reason(core, namespace, "lab") == "ErrImagePull")
    wait_for("ImagePullBackOff", lambda: _waiting_reason(core, namespace, "lab") == "ImagePullBackOff")

    pod = core.read_namespaced_pod("lab", namespace)
    assert pod.status.phase == "Pending"
    assert 'Back-off pulling image "registry.example.edu/jupyterlab:4"' in pod.status.container_statuses[0].state.waiting.message
    failed = core.list_namespaced_event(namespace, field_selector="reason=Failed").items
    assert failed[0].source.component == "kubelet"
    assert failed[0].message == 'Failed to pull image "registry.example.edu/jupyterlab:4": not found'


def test_the_failure_annotation_fails_a_pod_too(core: client.CoreV1Api, namespace: str) -> None:
    manifest = pod_manifest("lab")
    manifest["metadata"]["annotations"] = {FAILURE_ANNOTATION: "ErrImagePull"}
    core.create_namespaced_pod(namespace, manifest)

    wait_for("ImagePullBackOff", lambda: _waiting_reason(core, namespace, "lab") == "ImagePullBackOff")


def test_a_running_pod_killed_for_memory_fails_with_oomkilled(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("lab"))
    wait_for("the pod Running", lambda: core.read_namespaced_pod("lab", namespace).status.phase == "Running")

    devcluster.simulator.fail_pod(namespace, "lab", "OOMKilled")

    pod = wait_for("the pod Failed", lambda: (p := core.read_namespaced_pod("lab", namespace)).status.phase == "Failed" and p)
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"


def test_an_oomkilled_pod_that_restarts_backs_off(devcluster: DevCluster, core: client.CoreV1Api, namespace: str) -> None:
    devcluster.simulator.fail_pod(namespace, "lab", "OOMKilled")
    core.create_namespaced_pod(namespace, pod_manifest("lab", restartPolicy="Always"))

    wait_for("CrashLoopBackOff", lambda: _waiting_reason(core, namespace, "lab") == "CrashLoopBackOff")

    [status] = core.read_namespaced_pod("lab", namespace).status.container_statuses
    assert status.last_state.terminated.reason == "OOMKilled"
    assert status.restart_count == 1


def test_a_lost_node_is_marked_not_ready_by_the_controller_manager(devcluster: DevCluster, core: client.CoreV1Api) -> None:
    name = devcluster.nodes[0].name

    def unreachable() -> client.V1Node | None:
        node = core.read_node(name)
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        tainted = "node.kubernetes.io/unreachable" in {taint.key for taint in node.spec.taints or []}
        return node if ready.status == "Unknown" and tainted else None

    devcluster.simulator.lose_node(name)
    try:
        node = wait_for("the node NotReady and tainted", unreachable, timeout=devcluster.node_monitor_grace_seconds + 15)
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert (ready.reason, ready.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    finally:
        devcluster.simulator.restore_node(name)
        devcluster.wait_for_nodes_ready()
