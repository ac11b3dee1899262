"""The vendor's word on vLLM: which models it supports on FlexNPU, and what its log errors mean."""

from __future__ import annotations

import pytest

from labs.domain.reasons import Reason
from labs.domain.vllm import VENDOR_MODELS, log_reason, vendor_supports

EXIT = Reason.of("driver.container_exit", reason="Error", exit_code=1)


@pytest.mark.parametrize(
    "model",
    [
        "Qwen/Qwen3-8B",
        "qwen/qwen3-0.6b",
        "/models/Qwen3-32B/",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "Qwen/QwQ-32B",
        "Qwen/Qwen3-Embedding-0.6B",
        "Qwen/Qwen3.5-27B",
        "Qwen/Qwen3-VL-4B-Thinking",
    ],
)
def test_the_vendors_models_are_supported_by_id_or_path(model: str) -> None:
    assert vendor_supports(model)


@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen3-4B", "Qwen/Qwen3-VL-32B-Instruct", "", "gpt2"])
def test_models_off_the_vendors_list_are_not(model: str) -> None:
    assert not vendor_supports(model)


def test_every_listed_model_is_supported() -> None:
    assert all(vendor_supports(model) for model in VENDOR_MODELS)


def test_a_model_that_is_no_string_is_refused() -> None:
    with pytest.raises(TypeError):
        vendor_supports(None)  # type: ignore[arg-type]


def test_alloc_sq_cq_fail_anywhere_in_the_log_is_the_vendors_reason() -> None:
    log = "INFO start\n[ERROR] RUNTIME [SqCqManage] Alloc sq cq fail, ret=207018\nTraceback (most recent call last):\n"

    reason = log_reason(log, cause=EXIT, args=["Qwen/Qwen3-8B", "--max-num-batched-tokens=2048"])

    assert reason == Reason.of("vllm.alloc_sq_cq_fail", cause=EXIT, tokens="2048")
    assert "Error, exit code 1" in str(reason) and "--enforce-eager" in str(reason)


def test_in_eager_mode_already_the_advice_is_fewer_batched_tokens() -> None:
    args = ["--max-num-batched-tokens=2048", "--enforce-eager", "--max-num-batched-tokens", "1024"]

    reason = log_reason("[SqCqManage] Alloc sq cq fail", cause=EXIT, args=args)

    assert reason == Reason.of("vllm.alloc_sq_cq_fail_eager", cause=EXIT, tokens="1024")


def test_a_command_line_without_batched_tokens_gets_the_advice_without_a_number() -> None:
    reason = log_reason("alloc SQ CQ fail", cause=EXIT, args=["vllm", "serve", "Qwen/Qwen3-8B"])

    assert reason == Reason.of("vllm.alloc_sq_cq_fail_default", cause=EXIT)


def test_other_logs_have_no_vendor_reason() -> None:
    assert log_reason("RuntimeError: NPU out of memory", cause=EXIT, args=[]) is None
