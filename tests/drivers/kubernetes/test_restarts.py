"""KubernetesDriver reads a lab pod's restarts (``restartCount``, ``lastState``, CrashLoopBackOff)
from kmock's API emulator, and leaves judging them to the controller."""

from __future__ import annotations

import pytest

from labs.domain.reasons import Reason
from labs.drivers import PollStatus
from labs.drivers.kubernetes import KubernetesDriver
from tests.drivers.helpers import make_spec
from tests.drivers.kubernetes.emulator import EmulatorThread, Kubelet, api

ERROR_EXIT = Reason.of("driver.container_exit", reason="Error", exit_code=1)
OOM_EXIT = Reason.of("driver.container_exit", reason="OOMKilled", exit_code=137)


@pytest.fixture
def pod(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> tuple[str, dict]:
    """A lab's session id and its pod as the emulator holds it."""
    spec = make_spec()
    k8s_driver.create(spec)
    (pod,) = emulator.objects("pods")
    return spec.session_id, pod


def test_a_lab_pod_is_restarted_by_the_kubelet_when_its_container_fails(pod: tuple[str, dict]) -> None:
    _session_id, manifest = pod
    assert manifest["spec"]["restartPolicy"] == "OnFailure"


def test_a_container_that_ended_with_an_error_is_restarting_not_failed(
    k8s_driver: KubernetesDriver, kubelet: Kubelet, pod: tuple[str, dict]
) -> None:
    session_id, manifest = pod

    kubelet.ended(manifest, exit_code=1, reason="Error")
    result = k8s_driver.poll(session_id)

    assert result.status == PollStatus.PENDING
    assert (result.restarts, result.last_exit) == (1, ERROR_EXIT)


def test_a_container_in_crash_loop_back_off_counts_the_restart_it_waits_for(
    k8s_driver: KubernetesDriver, kubelet: Kubelet, pod: tuple[str, dict]
) -> None:
    session_id, manifest = pod

    kubelet.backing_off(manifest, exit_code=137, reason="OOMKilled", restart_count=2)
    observed = k8s_driver.observe()[session_id]

    assert observed.status == PollStatus.PENDING
    assert (observed.restarts, observed.last_exit) == (3, OOM_EXIT)


def test_a_lab_running_again_reports_the_kubelets_restarts_and_how_it_last_ended(
    k8s_driver: KubernetesDriver, kubelet: Kubelet, pod: tuple[str, dict]
) -> None:
    session_id, manifest = pod

    kubelet.running(manifest, restart_count=1, last_end={"exitCode": 137, "reason": "OOMKilled", "message": "out of memory"})
    result = k8s_driver.poll(session_id)

    assert result.status == PollStatus.RUNNING
    assert result.restarts == 1
    assert str(result.last_exit) == "OOMKilled, exit code 137 (out of memory)"


def test_a_lab_that_never_restarted_reports_none(k8s_driver: KubernetesDriver, kubelet: Kubelet, pod: tuple[str, dict]) -> None:
    session_id, manifest = pod

    kubelet.running(manifest)
    result = k8s_driver.poll(session_id)

    assert (result.status, result.restarts, result.last_exit) == (PollStatus.RUNNING, 0, None)


def test_a_container_that_ends_is_waited_for_only_when_its_pods_policy_restarts_it(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread, kubelet: Kubelet
) -> None:
    failed, clean, never = make_spec(), make_spec(), make_spec()
    for spec in (failed, clean, never):
        k8s_driver.create(spec)
    pods = {p["metadata"]["labels"]["npu-lab.portal/session-id"]: p for p in emulator.objects("pods")}
    # A pod made before labs were restarted (restartPolicy Never) is still failed at once.
    name, namespace = pods[never.session_id]["metadata"]["name"], pods[never.session_id]["metadata"]["namespace"]
    api(emulator.url).patch_namespaced_pod(name, namespace, {"spec": {"restartPolicy": "Never"}})

    kubelet.ended(pods[failed.session_id], exit_code=1, reason="Error")
    kubelet.ended(pods[clean.session_id], exit_code=0, reason="Completed")
    kubelet.ended(pods[never.session_id], exit_code=1, reason="Error")
    observed = k8s_driver.observe()

    assert observed[failed.session_id].status == PollStatus.PENDING
    assert observed[clean.session_id].status == PollStatus.FAILED
    assert str(observed[clean.session_id].reason) == "the lab stopped: Completed, exit code 0"
    assert observed[clean.session_id].restarts == 0
    assert observed[never.session_id].status == PollStatus.FAILED
    assert str(observed[never.session_id].reason) == "the lab stopped: Error, exit code 1"
    assert observed[never.session_id].restarts == 0
