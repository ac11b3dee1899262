"""The simulator's failures as a kubelet would report them: image pull, OOMKilled, a restart, a lost node."""

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


def _pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    return core.read_namespaced_pod(name, namespace)


def _ready(pod: client.V1Pod) -> bool:
    return {c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True"


def test_a_pod_that_restarts_once_while_starting_ends_running_with_one_restart(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    devcluster.simulator.fail_pod(namespace, "lab", "RestartOnce")
    core.create_namespaced_pod(namespace, pod_manifest("lab", restartPolicy="OnFailure"))

    pod = wait_for("the pod Running and Ready again", lambda: _ready(p := _pod(core, namespace, "lab")) and p)
    [status] = pod.status.container_statuses
    assert status.restart_count == 1
    assert (status.last_state.terminated.reason, status.last_state.terminated.exit_code) == ("Error", 1)
    assert status.state.running is not None and pod.status.phase == "Running"


def test_a_running_pod_killed_for_memory_once_comes_back_with_one_restart(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("lab", restartPolicy="OnFailure"))
    wait_for("the pod Ready", lambda: _ready(_pod(core, namespace, "lab")))

    devcluster.simulator.fail_pod(namespace, "lab", "OOMKilledOnce")

    pod = wait_for(
        "the pod Ready after a restart",
        lambda: _ready(p := _pod(core, namespace, "lab")) and p.status.container_statuses[0].restart_count == 1 and p,
    )
    assert pod.status.container_statuses[0].last_state.terminated.reason == "OOMKilled"


def test_a_pod_that_is_never_restarted_fails_when_its_container_ends(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    devcluster.simulator.fail_pod(namespace, "lab", "RestartOnce")
    core.create_namespaced_pod(namespace, pod_manifest("lab"))  # restartPolicy Never

    pod = wait_for("the pod Failed", lambda: (p := _pod(core, namespace, "lab")).status.phase == "Failed" and p)
    assert pod.status.container_statuses[0].state.terminated.reason == "Error"
    assert pod.status.container_statuses[0].restart_count == 0


def test_a_restart_fraction_outside_zero_to_one_is_refused(devcluster: DevCluster) -> None:
    with pytest.raises(ValueError, match="restart_fraction must be between 0 and 1"):
        devcluster.simulator.restart_fraction = 1.5
    assert devcluster.simulator.restart_fraction == 0.0


def _ready_condition(core: client.CoreV1Api, namespace: str, name: str) -> str:
    conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
    return next((c.status for c in conditions if c.type == "Ready"), "")


def _running_pod(devcluster: DevCluster, core: client.CoreV1Api, namespace: str, node: str) -> str:
    core.create_namespaced_pod(namespace, pod_manifest("web", nodeName=node, restartPolicy="Always"))
    wait_for("the pod Ready", lambda: _ready_condition(core, namespace, "web") == "True")
    return "web"


def test_a_running_pod_marked_not_ready_by_another_client_is_reported_ready_again(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    """The node lifecycle controller marks a node's pods not Ready when the node misses its lease,
    even for a moment; only the pod's kubelet lifts the mark (a Deployment stayed unavailable)."""
    name = _running_pod(devcluster, core, namespace, devcluster.nodes[0].name)
    conditions = core.read_namespaced_pod(name, namespace).status.conditions
    marked = [{"type": c.type, "status": "False" if c.type == "Ready" else c.status} for c in conditions]

    core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": marked}})

    wait_for("the pod Ready again", lambda: _ready_condition(core, namespace, name) == "True", timeout=10)
    assert devcluster.simulator.reconciled[f"{namespace}/{name}"] >= 1


def test_a_lost_node_is_marked_not_ready_by_the_controller_manager(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    name = devcluster.nodes[0].name
    pod = _running_pod(devcluster, core, namespace, name)

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
        wait_for("its pod marked not Ready", lambda: _ready_condition(core, namespace, pod) == "False")
    finally:
        devcluster.simulator.restore_node(name)
        devcluster.wait_for_nodes_ready()
    # Back, its kubelet reports the pod as it left it: Ready.
    wait_for("the pod Ready again", lambda: _ready_condition(core, namespace, pod) == "True", timeout=15)


def test_a_restarted_node_reports_a_new_boot_fails_its_pods_and_brings_them_back(
    devcluster: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    node = devcluster.nodes[0]
    count = next(iter(node.npu_resources()))
    core.create_namespaced_pod(
        namespace, pod_manifest("lab", resources={count: "1"}, nodeName=node.name, restartPolicy="OnFailure")
    )
    # A pod without NPUs: the kubelet admits it again at once, its devices are not the plugin's.
    core.create_namespaced_pod(namespace, pod_manifest("web", nodeName=node.name, restartPolicy="OnFailure"))
    for name in ("lab", "web"):
        wait_for(f"{name} Running", lambda name=name: core.read_namespaced_pod(name, namespace).status.phase == "Running")
    before = core.read_node(node.name).status.node_info.boot_id
    assert before

    devcluster.simulator.reboot_node(node.name, devices_after_seconds=2.0)

    def failed() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("lab", namespace)
        return pod if pod.status.phase == "Failed" else None

    pod = wait_for("the pod Failed", failed)
    assert pod.status.reason == "UnexpectedAdmissionError"
    status = core.read_node(node.name).status
    assert status.node_info.boot_id not in ("", before)
    assert status.allocatable[count] == "0"
    assert core.read_namespaced_pod("web", namespace).status.phase == "Running"
    back = wait_for(
        "the pod running again", lambda: (p := core.read_namespaced_pod("lab", namespace)).status.phase == "Running" and p
    )
    assert back.status.container_statuses[0].restart_count == 1
    wait_for("the NPUs reported", lambda: core.read_node(node.name).status.allocatable[count] == node.npu_resources()[count])
