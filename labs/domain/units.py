"""Resource units and the vendor limits of FlexNPU (DESIGN §1).

Amounts are integers with the unit in the name: ``core_percent`` is a percentage of one card's
AI Core (a guaranteed floor), ``memory_mib`` a hard cap in MiB, always a multiple of 128.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

CORE_PERCENT_MAX = 100
MEMORY_GRANULE_MIB = 128
# A template may ask for at most this many whole cards (an Ascend server's 8), and never more
# than one node has: whole cards are all on one node (``volcano.sh/flexnpu-num``).
WHOLE_CARDS_MAX = 8


class Scenario(StrEnum):
    DEVELOPMENT = "development"
    INFERENCE = "inference"


# At most this many instances share one card / one node, by scenario (CCE FlexNPU guide).
CARD_INSTANCE_CAP = {Scenario.DEVELOPMENT: 16, Scenario.INFERENCE: 8}
NODE_INSTANCE_CAP = {Scenario.DEVELOPMENT: 128, Scenario.INFERENCE: 64}


# The scenario a template of each kind is in unless its author says otherwise: a vLLM server is
# the guide's 小模型推理场景 (8 per card, 64 per server), a JupyterLab its 模型开发 / 算子调测场景.
KIND_SCENARIO = {"jupyter": Scenario.DEVELOPMENT, "vllm": Scenario.INFERENCE}


def default_scenario(kind: str) -> Scenario:
    """The scenario of a ``kind`` ("jupyter" or "vllm") template whose author picked none."""
    try:
        return KIND_SCENARIO[kind]
    except KeyError:
        raise ValueError(f"unknown template kind {kind!r}; expected one of {sorted(KIND_SCENARIO)}") from None


def card_instance_cap(scenarios: Iterable[Scenario]) -> int:
    """The tightest per-card cap among the scenarios present (development alone: 16)."""
    return min((CARD_INSTANCE_CAP[s] for s in scenarios), default=CARD_INSTANCE_CAP[Scenario.DEVELOPMENT])


def node_instance_slots(cards: int, scenario: Scenario) -> int:
    """How many ``scenario`` instances a node with ``cards`` usable cards holds: both caps at once.

    A 16-card server still holds at most 128 development (64 inference) instances, not 16 x 16.
    """
    if not isinstance(cards, int) or isinstance(cards, bool) or cards < 0:
        raise ValueError(f"cards must be a whole number >= 0, not {cards!r}")
    return min(cards * CARD_INSTANCE_CAP[Scenario(scenario)], NODE_INSTANCE_CAP[Scenario(scenario)])


# Host resources a template's pod asks of its node, by kind (issue 14): a teaching JupyterLab
# (a kernel or two, pandas-sized data) and a vLLM server of a small model (the API server,
# the tokenizer, the weights staged in host memory while they load). Requests are what
# placement counts per node; limits are what the pod may reach.
HOST_DEFAULTS = {
    "jupyter": {
        "cpu_request_millicores": 500,
        "cpu_limit_millicores": 2000,
        "host_memory_request_mib": 2048,
        "host_memory_limit_mib": 4096,
        "ephemeral_storage_mib": 10240,
    },
    "vllm": {
        "cpu_request_millicores": 2000,
        "cpu_limit_millicores": 4000,
        "host_memory_request_mib": 8192,
        "host_memory_limit_mib": 16384,
        "ephemeral_storage_mib": 20480,
    },
}
