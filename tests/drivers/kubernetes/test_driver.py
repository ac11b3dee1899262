"""KubernetesDriver against kmock's API emulator over real HTTP, with a stand-in kubelet."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace

import kmock
import pytest

from labs.domain.reasons import Reason
from labs.drivers import DriverError, PollStatus, build_driver
from labs.drivers.base import HostResources
from labs.drivers.kubernetes import KubernetesDriver
from tests.drivers.helpers import make_spec
from tests.drivers.kubernetes.conftest import driver_config
from tests.drivers.kubernetes.emulator import EmulatorThread, Kubelet


def only_pod(emulator: EmulatorThread) -> dict:
    (pod,) = emulator.objects("pods")
    return pod


def test_create_makes_a_pod_with_the_share_and_the_host_as_requests_and_limits(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread
) -> None:
    spec = replace(make_spec(), host=HostResources(1000, 3000, 2048, 8192, 5120))

    uid = k8s_driver.create(spec)

    pod = only_pod(emulator)
    assert pod["metadata"]["uid"] == uid
    assert pod["metadata"]["namespace"] == "lab-npu101"
    container = pod["spec"]["containers"][0]
    share = {"volcano.sh/flexnpu-core.percentage": "25", "volcano.sh/flexnpu-memory.128mi": "64", "volcano.sh/flexnpu-num": "1"}
    assert container["resources"] == {
        "requests": {**share, "cpu": "1000m", "memory": "2048Mi", "ephemeral-storage": "5120Mi"},
        "limits": {**share, "cpu": "3000m", "memory": "8192Mi", "ephemeral-storage": "5120Mi"},
    }
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-a"}


def test_create_makes_an_unprivileged_pod_without_a_service_account_token(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread
) -> None:
    k8s_driver.create(make_spec())

    pod = only_pod(emulator)
    context = pod["spec"]["containers"][0]["securityContext"]
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["runAsNonRoot"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert not any("hostPath" in volume for volume in pod["spec"].get("volumes", []))


def test_the_secret_lives_in_a_secret_object_and_never_in_the_pod(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> None:
    spec = make_spec()

    k8s_driver.create(spec)

    (secret,) = emulator.objects("secrets")
    assert secret["stringData"] == {"token": spec.secret}
    assert spec.secret not in str(only_pod(emulator))
    (service,) = emulator.objects("services")
    assert service["spec"]["selector"] == {"npu-lab.portal/session-id": spec.session_id}


def test_create_twice_returns_the_same_uid(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> None:
    spec = make_spec()

    assert k8s_driver.create(spec) == k8s_driver.create(spec)
    assert len(emulator.objects("pods")) == 1


def test_poll_follows_the_pod_from_pending_to_running(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread, kubelet: Kubelet
) -> None:
    spec = make_spec()
    k8s_driver.create(spec)
    pod = only_pod(emulator)

    assert k8s_driver.poll(spec.session_id).status == PollStatus.PENDING
    kubelet.scheduled(pod)
    assert k8s_driver.poll(spec.session_id) == k8s_driver.poll(spec.session_id)
    assert k8s_driver.poll(spec.session_id).reason == Reason.of("driver.starting_container")
    kubelet.running(pod, ready=False)
    assert k8s_driver.poll(spec.session_id).status == PollStatus.PENDING
    kubelet.running(pod)
    result = k8s_driver.poll(spec.session_id)

    assert result.status == PollStatus.RUNNING
    assert result.access_url == f"https://labs.example.edu/labs/{spec.session_id}/"


def test_an_unschedulable_pod_is_pending_waiting_for_an_npu(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread, kubelet: Kubelet
) -> None:
    spec = make_spec()
    k8s_driver.create(spec)

    kubelet.unschedulable(only_pod(emulator), "0/1 nodes are available: 1 Insufficient volcano.sh/flexnpu-core.percentage.")
    result = k8s_driver.poll(spec.session_id)

    assert result.status == PollStatus.PENDING
    assert str(result.reason) == "waiting for an NPU: 0/1 nodes are available: 1 Insufficient volcano.sh/flexnpu-core.percentage."


def test_an_image_pull_failure_fails_the_session(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread, kubelet: Kubelet
) -> None:
    spec = make_spec(image="npu-lab/missing:1")
    k8s_driver.create(spec)

    kubelet.image_pull_failed(only_pod(emulator), 'pull access denied for "npu-lab/missing:1"')
    result = k8s_driver.poll(spec.session_id)

    assert result.status == PollStatus.FAILED
    assert str(result.reason) == 'image pull failed: pull access denied for "npu-lab/missing:1"'


def test_a_pod_whose_container_exited_is_failed_with_the_reason(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread, kubelet: Kubelet
) -> None:
    spec = make_spec()
    k8s_driver.create(spec)

    kubelet.failed(only_pod(emulator), exit_code=137, reason="OOMKilled")
    result = k8s_driver.poll(spec.session_id)

    assert result.status == PollStatus.FAILED
    assert str(result.reason) == "the lab stopped: OOMKilled, exit code 137"


def test_a_pod_pending_past_the_spawn_timeout_is_failed(emulator: EmulatorThread, kubelet: Kubelet) -> None:
    from labs.drivers import build_driver
    from tests.drivers.kubernetes.conftest import driver_config

    driver = build_driver(driver_config(emulator.url, spawn_timeout_seconds=0.5))
    spec = make_spec()
    driver.create(spec)
    kubelet.unschedulable(only_pod(emulator), "no NPU")

    import time

    time.sleep(1.6)  # creationTimestamp has whole-second resolution
    result = driver.poll(spec.session_id)

    assert result.status == PollStatus.FAILED
    assert str(result.reason) == "the lab did not start within 0.5 s (waiting for an NPU: no NPU)"


def test_delete_removes_pod_service_and_secret(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> None:
    spec = make_spec()
    k8s_driver.create(spec)

    k8s_driver.delete(spec.session_id)

    assert k8s_driver.poll(spec.session_id).status == PollStatus.GONE
    assert k8s_driver.list() == set()
    assert emulator.objects("pods") == emulator.objects("services") == emulator.objects("secrets") == []


def test_delete_leaves_other_sessions_alone(k8s_driver: KubernetesDriver) -> None:
    keep, drop = make_spec(), make_spec()
    k8s_driver.create(keep)
    k8s_driver.create(drop)

    k8s_driver.delete(drop.session_id)

    assert k8s_driver.list() == {keep.session_id}


def test_list_ignores_pods_the_portal_did_not_make(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> None:
    from tests.drivers.kubernetes.emulator import api

    api(emulator.url).create_namespaced_pod(
        "lab-npu101", {"metadata": {"name": "other", "labels": {"npu-lab.portal/session-id": str(uuid.uuid4())}}}
    )
    spec = make_spec()
    k8s_driver.create(spec)

    assert k8s_driver.list() == {spec.session_id}


def test_a_share_the_device_plugin_cannot_express_is_refused_before_any_api_call(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread
) -> None:
    from dataclasses import replace

    spec = make_spec()
    spec = replace(spec, card=replace(spec.card, memory_mib=1000))

    with pytest.raises(DriverError, match="not a multiple of 128 MiB"):
        k8s_driver.create(spec)
    assert len(emulator.kmock) == 0


def test_a_failed_scheduling_event_explains_a_pod_without_conditions(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread
) -> None:
    from tests.drivers.kubernetes.emulator import api

    spec = make_spec()
    uid = k8s_driver.create(spec)
    pod = only_pod(emulator)
    api(emulator.url).create_namespaced_event(
        pod["metadata"]["namespace"],
        {
            "metadata": {"name": "lab.1", "namespace": pod["metadata"]["namespace"]},
            "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"], "uid": uid},
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/8 nodes are available: 8 Insufficient volcano.sh/flexnpu-memory.128mi.",
            "lastTimestamp": "2026-01-01T00:00:00Z",
        },
    )

    result = k8s_driver.poll(spec.session_id)

    assert result.status == PollStatus.PENDING
    assert str(result.reason) == "waiting for an NPU: 0/8 nodes are available: 8 Insufficient volcano.sh/flexnpu-memory.128mi."


def test_the_token_option_is_sent_as_a_bearer_token(k8s_driver: KubernetesDriver) -> None:
    headers: dict[str, str] = {}

    k8s_driver.api_client.update_params_for_auth(headers, [], ["BearerToken"])

    # The driver_config's token; without "Bearer " the API server takes the request as anonymous.
    assert headers == {"authorization": "Bearer test-token"}


def test_creates_observes_and_deletes_reuse_their_connections(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> None:
    """Answers read as plain JSON are read to their end, so each connection goes back to the pool:
    a connection left holding an unread answer would cost a new TLS handshake per request. A
    lab's secret, service and route are made side by side: three connections at most, kept."""
    specs = [replace(make_spec(), session_id=str(uuid.uuid4())) for _ in range(5)]
    for spec in specs:
        k8s_driver.create(spec)
    assert set(k8s_driver.observe()) == {spec.session_id for spec in specs}
    for spec in specs:
        k8s_driver.delete(spec.session_id)

    manager = k8s_driver.core.api_client.rest_client.pool_manager
    (pool,) = [manager.pools[key] for key in manager.pools.keys()]
    assert 1 <= pool.num_connections <= 3


def test_a_labs_secret_service_and_route_are_made_side_by_side(emulator: EmulatorThread) -> None:
    driver = build_driver(driver_config(emulator.url, ingress_host="labs.example.edu"))
    seen: list[float] = []

    async def slow(request: kmock.Request) -> None:
        seen.append(time.monotonic())
        await asyncio.sleep(0.5)
        raise NotImplementedError  # then the emulator makes it

    for plural in ("secrets", "services"):
        emulator.react(f"post /api/v1/namespaces/lab-npu101/{plural}", slow)
    emulator.react("post /apis/networking.k8s.io/v1/namespaces/lab-npu101/ingresses", slow)

    started = time.monotonic()
    driver.create(make_spec())

    assert len(seen) == 3 and max(seen) - min(seen) < 0.4  # all three asked before the first answered
    assert time.monotonic() - started < 1.4
    assert [len(emulator.objects(plural)) for plural in ("secrets", "services", "ingresses")] == [1, 1, 1]


@pytest.mark.parametrize("node", ["", "a,metadata.namespace=x", "Node_1", "../n1"])
def test_pods_on_refuses_what_is_not_a_node_name_before_asking_the_api(k8s_driver: KubernetesDriver, node: str) -> None:
    with pytest.raises(DriverError, match="Not a node name"):
        k8s_driver.pods_on(node)
