"""vLLM as the vendor runs it: the models it supports on FlexNPU.

Source: Huawei Cloud CCE, "使用FlexNPU实现NPU资源虚拟化与隔离" (the FlexNPU user guide),
约束与限制 → 模型支持.
"""

from __future__ import annotations

# 约束与限制 → 模型支持: "支持DeepSeek-R1-Distill-Llama-8B、Qwen/QwQ-32B、Qwen3（1.7B/0.6B/8B/32B）、
# Qwen3-Embedding-0.6B、Qwen3.5-9B、Qwen3.5-27B，以及Qwen3-VL（2B/4B/8B）系列模型。"
# (推理引擎: "仅支持vLLM Ascend v0.18.0，CANN 8.5.0".) Named as on Hugging Face.
VENDOR_MODELS: tuple[str, ...] = (
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
    "Qwen/QwQ-32B",
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-Embedding-0.6B",
    "Qwen/Qwen3.5-9B",
    "Qwen/Qwen3.5-27B",
    "Qwen/Qwen3-VL-2B-Instruct",
    "Qwen/Qwen3-VL-4B-Instruct",
    "Qwen/Qwen3-VL-8B-Instruct",
)
# "Qwen3-VL（2B/4B/8B）系列": every variant of these sizes (Instruct, Thinking, FP8 ...) is the series.
VENDOR_MODEL_SERIES: tuple[str, ...] = ("Qwen3-VL-2B-", "Qwen3-VL-4B-", "Qwen3-VL-8B-")

_VENDOR_NAMES = frozenset(model.rsplit("/", 1)[-1].lower() for model in VENDOR_MODELS)


def vendor_supports(model: str) -> bool:
    """Whether the vendor lists ``model`` as supported on FlexNPU.

    ``model`` is what ``vllm serve`` is given: a Hugging Face id (``Qwen/Qwen3-8B``) or a path
    whose last part is the model's name (``/models/Qwen3-8B``); case does not matter.
    """
    if not isinstance(model, str):
        raise TypeError(f"model must be a str, not {model!r}")
    name = model.strip().rstrip("/").rsplit("/", 1)[-1].lower()
    return name in _VENDOR_NAMES or any(name.startswith(series.lower()) for series in VENDOR_MODEL_SERIES)

