"""A share on several whole cards, as each device profile asks for it in a pod."""

from __future__ import annotations

from dataclasses import replace

import pytest

from labs.drivers.base import CardBinding, DriverError, LaunchSpec
from labs.drivers.kubernetes.builders import PodOptions, make_pod
from labs.drivers.kubernetes.profiles import FlexNPUProfile, HAMiProfile, VNPUProfile

CARD_MIB = 65536
TWO_CARDS = CardBinding(
    node="n1",
    card_index=2,
    die_id="die-2",
    chip_type="910B",
    core_percent=200,
    memory_mib=2 * CARD_MIB,
    scenario="development",
    card_memory_mib=CARD_MIB,
    cards=2,
)


def test_flexnpu_asks_for_two_vnpus_with_200_percent_core_and_both_cards_memory() -> None:
    request = FlexNPUProfile().render(TWO_CARDS)

    assert request.resources == {
        "volcano.sh/flexnpu-num": "2",
        "volcano.sh/flexnpu-core.percentage": "200",
        "volcano.sh/flexnpu-memory.128mi": str(2 * CARD_MIB // 128),
    }
    assert request.node_selector == {"kubernetes.io/hostname": "n1"}


def test_vnpu_asks_for_whole_cards_by_number_alone_in_hard_mode_without_a_die_id() -> None:
    request = VNPUProfile(mode="soft").render(TWO_CARDS)

    assert request.resources == {"huawei.com/vnpu-number": "2"}
    assert request.annotations == {"huawei.com/vnpu-mode": "hard"}


def test_hami_asks_for_two_whole_devices() -> None:
    request = HAMiProfile(device="Ascend910B3").render(TWO_CARDS)

    assert request.resources == {"huawei.com/Ascend910B3": "2"}


@pytest.mark.parametrize("profile", [FlexNPUProfile(), VNPUProfile(), HAMiProfile()])
def test_whole_cards_with_less_than_all_their_core_are_refused(profile) -> None:
    with pytest.raises(DriverError, match="2 whole cards has 200 % of AI Core, not 150 %"):
        profile.render(replace(TWO_CARDS, core_percent=150))


def test_the_pod_of_a_two_card_vllm_lab_says_so_and_fills_each_card() -> None:
    spec = LaunchSpec(session_id="s-1", kind="vllm", image="registry.example.edu/vllm:1", secret="k", card=TWO_CARDS)

    pod = make_pod(spec, profile=FlexNPUProfile(), namespace="lab-x", options=PodOptions())

    [container] = pod["spec"]["containers"]
    assert container["resources"]["limits"]["volcano.sh/flexnpu-num"] == "2"
    assert pod["metadata"]["annotations"]["npu-lab.portal/cards"] == "2"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FLEXNPU_CARDS"] == "2"
    # Each card is the lab's whole: 0.90 of what it sees, and the model split over both cards.
    assert "--gpu-memory-utilization=0.90" in container["args"]
    assert "--tensor-parallel-size=2" in container["args"]
    assert "--enforce-eager" not in container["args"]
