"""A vLLM lab that fails with a vendor error says so with the vendor's advice: its pod hands the log's
tail to Kubernetes (``FallbackToLogsOnError``), and the driver reads the error from it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from labs.domain.reasons import Reason
from labs.drivers import PollStatus
from labs.drivers.kubernetes import KubernetesDriver
from tests.drivers.helpers import CARD, make_spec
from tests.drivers.kubernetes.emulator import EmulatorThread, Kubelet

ERROR_EXIT = Reason.of("driver.container_exit", reason="Error", exit_code=1)
# vLLM Ascend's output when the card's streams are used up: the error, then the traceback and
# the engine's shutdown after it.
ALLOC_SQ_CQ_FAIL_LOG = "\n".join(
    [
        "INFO 12-02 05:01:12 [model_runner_v1.py:2104] Loading model weights took 1.1 GB",
        "[ERROR] RUNTIME(1234,python3):2026-12-02-05:01:15.123.456 [SqCqManage] Alloc sq cq fail, ret=207018",
        "Traceback (most recent call last):",
        '  File "/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py", line 1875, in capture_model',
        "RuntimeError: ACL stream synchronize failed, error code:507035",
        "ERROR 12-02 05:01:16 [core.py:700] EngineCore failed to start.",
    ]
)


@pytest.fixture
def vllm_pod(k8s_driver: KubernetesDriver, emulator: EmulatorThread) -> tuple[str, dict]:
    """A vLLM lab on a share of a card: its pod runs in eager mode (``vllm_enforce_eager`` null)."""
    spec = make_spec(kind="vllm", image="quay.io/ascend/vllm-ascend:v0.18.0")
    k8s_driver.create(spec)
    (pod,) = emulator.objects("pods")
    return spec.session_id, pod


def test_alloc_sq_cq_fail_in_a_vllm_labs_log_is_its_reason_with_the_vendors_advice(
    k8s_driver: KubernetesDriver, kubelet: Kubelet, vllm_pod: tuple[str, dict]
) -> None:
    session_id, manifest = vllm_pod
    assert {"--max-num-batched-tokens=2048", "--enforce-eager"} <= set(manifest["spec"]["containers"][0]["args"])

    kubelet.ended(manifest, exit_code=1, reason="Error", log=ALLOC_SQ_CQ_FAIL_LOG)
    result = k8s_driver.poll(session_id)

    assert result.status == PollStatus.PENDING  # the kubelet starts it again (restartPolicy OnFailure)
    assert result.last_exit == Reason.of("vllm.alloc_sq_cq_fail_eager", cause=ERROR_EXIT, tokens="2048")
    words = str(result.last_exit)
    assert "Alloc sq cq fail" in words and "--max-num-batched-tokens (this lab ran with 2048, already in eager mode)" in words


def test_on_a_whole_card_the_advice_is_fewer_batched_tokens_then_eager_mode(
    k8s_driver: KubernetesDriver, emulator: EmulatorThread, kubelet: Kubelet
) -> None:
    whole = replace(CARD, core_percent=100, memory_mib=CARD.card_memory_mib)
    spec = replace(make_spec(kind="vllm", image="quay.io/ascend/vllm-ascend:v0.18.0"), card=whole)
    k8s_driver.create(spec)
    (manifest,) = emulator.objects("pods")
    assert "--enforce-eager" not in manifest["spec"]["containers"][0]["args"]

    kubelet.failed(manifest, exit_code=1, reason="Error", log=ALLOC_SQ_CQ_FAIL_LOG)
    result = k8s_driver.poll(spec.session_id)

    assert result.status == PollStatus.FAILED
    cause = Reason.of("vllm.alloc_sq_cq_fail", cause=ERROR_EXIT, tokens="2048")
    assert result.reason == Reason.of("driver.lab_stopped", cause=cause)
    assert "--enforce-eager" in str(result.reason)


def test_a_vllm_lab_that_failed_otherwise_is_told_by_its_last_log_line(
    k8s_driver: KubernetesDriver, kubelet: Kubelet, vllm_pod: tuple[str, dict]
) -> None:
    session_id, manifest = vllm_pod
    log = "INFO loading\nValueError: The model's max seq len (32768) is larger than the KV cache can hold (4096)\n"

    kubelet.ended(manifest, exit_code=1, reason="Error", log=log)
    result = k8s_driver.poll(session_id)

    assert result.last_exit == Reason.of(
        "driver.with_detail",
        reason=ERROR_EXIT,
        detail="ValueError: The model's max seq len (32768) is larger than the KV cache can hold (4096)",
    )
