"""vLLM as the vendor runs it: the models it supports on FlexNPU and what its logs mean.

Source: Huawei Cloud CCE, "使用FlexNPU实现NPU资源虚拟化与隔离" (the FlexNPU user guide),
约束与限制 → 模型支持, and its 常见问题 on ``[SqCqManage] Alloc sq cq fail``.
"""

from __future__ import annotations

from labs.domain.reasons import Reason

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


# 常见问题, "运行vLLM推理服务时，日志中出现[SqCqManage] Alloc sq cq fail......报错，该如何处理？":
# "该报错通常表明物理NPU的Stream资源已耗尽，导致无法为任务分配新的Stream。您可以按照以下方式处理：
# 1. 降低Batch Size 适当减小vLLM启动参数中的"max_num_batched_tokens"，以降低并发推理对Stream资源的占用。
# 2. 切换为单算子模式 若降低Batch Size后仍无法解决，建议在启动vLLM时添加--enforce-eager参数，关闭ACLGraph图模式，
# 切换为单算子执行模式。" (the card's streams are used up: lower max_num_batched_tokens; then eager mode.)
ALLOC_SQ_CQ_FAIL = "alloc sq cq fail"
_BATCHED_TOKENS = "--max-num-batched-tokens"


def batched_tokens(args: list[str]) -> str:
    """The ``--max-num-batched-tokens`` of a ``vllm serve`` command line (the last one given wins,
    as in vLLM's argument parser); "" when it names none."""
    value = ""
    for i, arg in enumerate(args):
        if arg.startswith(_BATCHED_TOKENS + "="):
            value = arg.split("=", 1)[1]
        elif arg == _BATCHED_TOKENS and i + 1 < len(args):
            value = args[i + 1]
    return value


def log_reason(log: str, *, cause: Reason, args: list[str]) -> Reason | None:
    """The reason a vLLM lab failed for, when its log (``log``: any tail of it) says a known vendor
    error, with the vendor's advice; ``cause`` is the driver's own reason (exit code, signal) and
    ``args`` the server's command line (what it ran with). ``None`` when the log says none."""
    if ALLOC_SQ_CQ_FAIL not in log.lower():
        return None
    eager = "--enforce-eager" in args
    tokens = batched_tokens(args)
    if tokens and not eager:
        return Reason.of("vllm.alloc_sq_cq_fail", cause=cause, tokens=tokens)
    if tokens:
        return Reason.of("vllm.alloc_sq_cq_fail_eager", cause=cause, tokens=tokens)
    return Reason.of("vllm.alloc_sq_cq_fail_default", cause=cause)
