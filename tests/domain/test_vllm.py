"""The vendor's word on vLLM: which models it supports on FlexNPU."""

from __future__ import annotations

import pytest

from labs.domain.vllm import VENDOR_MODELS, vendor_supports


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

