"""Device profiles: resource names, units and the granularity each device plugin can express."""

from __future__ import annotations

from dataclasses import replace

import pytest

from labs.drivers.base import CardBinding, DriverError, DriverRefused
from labs.drivers.kubernetes.profiles import (
    FlexNPUProfile,
    HAMiProfile,
    VNPUProfile,
    get_profile,
    ledger_chip_type,
    parse_vnpu_register,
    vnpu_npu_type,
)

CARD = CardBinding(
    node="n1", card_index=2, die_id="die-2", chip_type="910B", core_percent=30, memory_mib=4096, scenario="inference"
)


def test_flexnpu_counts_memory_in_128_mib_units_and_pins_the_node() -> None:
    request = FlexNPUProfile().render(replace(CARD, memory_mib=300 * 128))

    assert request.resources == {
        "volcano.sh/flexnpu-core.percentage": "30",
        "volcano.sh/flexnpu-memory.128mi": "300",
        "volcano.sh/flexnpu-num": "1",
    }
    assert request.node_selector == {"kubernetes.io/hostname": "n1"}


def test_flexnpu_refuses_memory_that_is_not_a_multiple_of_128_mib() -> None:
    with pytest.raises(DriverError, match=r"1000 MiB is not a multiple of 128 MiB.*use 896 or 1024 MiB"):
        FlexNPUProfile().render(replace(CARD, memory_mib=1000))


def test_vnpu_counts_memory_in_gib_and_pins_the_card_by_die_id_and_type() -> None:
    request = VNPUProfile().render(replace(CARD, chip_type="Ascend910B4"))

    assert request.resources == {"huawei.com/vnpu-number": "1", "huawei.com/vnpu-cores": "30", "huawei.com/vnpu-memory.1Gi": "4"}
    assert request.annotations == {
        "huawei.com/vnpu-mode": "soft",
        "huawei.com/vnpu-soft-scheduler-policy": "elastic",
        "huawei.com/vnpu-use-npu-dieID": "die-2",
        "huawei.com/vnpu-use-npu-type": "NPU-ASCEND-910B4",
    }


def test_vnpu_hard_mode_sends_its_aicpu_level_and_no_soft_policy_nor_die_id_when_unknown() -> None:
    request = VNPUProfile(mode="hard").render(replace(CARD, die_id=""))

    assert request.annotations == {"huawei.com/vnpu-mode": "hard", "huawei.com/vnpu-hard-aicpu-level": "low"}
    high = VNPUProfile(mode="hard", hard_aicpu_level="high").render(CARD)
    assert high.annotations["huawei.com/vnpu-hard-aicpu-level"] == "high"


def test_vnpu_node_and_device_scheduling_policies_are_profile_options() -> None:
    profile = get_profile("vnpu", node_policy="spread", device_policy="binpack")

    annotations = profile.render(CARD).annotations

    assert annotations["huawei.com/vnpu-pod-node-scheduler-policy"] == "spread"
    assert annotations["huawei.com/vnpu-pod-device-scheduler-policy"] == "binpack"
    assert "huawei.com/vnpu-pod-node-scheduler-policy" not in VNPUProfile().render(CARD).annotations


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"node_policy": "pack"}, "node_policy must be 'binpack', 'spread' or '' \\(not sent\\), got 'pack'"),
        ({"device_policy": "random"}, "device_policy must be 'binpack', 'spread'"),
        ({"hard_aicpu_level": "max"}, "hard_aicpu_level must be one of low, middle, high, got 'max'"),
        ({"node_policy": 1}, "option 'node_policy' for device profile 'vnpu' must be str, got 1"),
    ],
)
def test_bad_vnpu_scheduling_options_are_refused(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        get_profile("vnpu", **settings)


def test_the_vnpu_device_type_is_spelt_as_the_node_registers_it() -> None:
    assert vnpu_npu_type("Ascend310P3") == "NPU-ASCEND-310P3"
    assert vnpu_npu_type("NPU-ASCEND-910B4") == "NPU-ASCEND-910B4"
    assert ledger_chip_type("NPU-ASCEND-310P3") == "Ascend310P3"


def test_vnpu_refuses_memory_that_is_not_whole_gib() -> None:
    with pytest.raises(DriverError, match="not a multiple of 1024 MiB"):
        VNPUProfile().render(replace(CARD, memory_mib=1536))


def test_hami_counts_memory_in_mib() -> None:
    request = HAMiProfile().render(replace(CARD, memory_mib=1000))

    assert request.resources == {
        "huawei.com/Ascend910B3": "1",
        "huawei.com/Ascend910B3-memory": "1000",
        "huawei.com/Ascend910B3-core": "30",
    }


@pytest.mark.parametrize("profile", ["flexnpu", "vnpu", "hami"])
@pytest.mark.parametrize("core_percent", [0, 101, -5])
def test_every_profile_refuses_a_core_share_outside_1_to_100(profile: str, core_percent: int) -> None:
    with pytest.raises(DriverError, match="whole percent from 1 to 100"):
        get_profile(profile).render(replace(CARD, core_percent=core_percent))


@pytest.mark.parametrize("profile", ["flexnpu", "vnpu", "hami"])
def test_every_profile_refuses_zero_memory(profile: str) -> None:
    with pytest.raises(DriverError, match="positive number of MiB"):
        get_profile(profile).render(replace(CARD, memory_mib=0))


def test_an_unknown_profile_or_setting_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown device profile 'mig'"):
        get_profile("mig")
    with pytest.raises(ValueError, match="vNPU policy"):
        get_profile("vnpu", policy="greedy")


def test_the_node_vnpu_register_annotation_gives_each_cards_die_id_and_chip_type() -> None:
    value = "0;37E96E64-20C10A5A-8C747124;32768;100;NPU-ASCEND-910B4:1;5F1C0A21-77D2E913-0B6A4C58;32768;100;NPU-ASCEND-910B4"

    assert parse_vnpu_register(value) == (
        ("37E96E64-20C10A5A-8C747124", "Ascend910B4"),
        ("5F1C0A21-77D2E913-0B6A4C58", "Ascend910B4"),
    )


@pytest.mark.parametrize("value", ["ready", "0;die;1;2", "0;;32768;100;NPU-ASCEND-910B4", "0;die;32768;100;"])
def test_a_register_annotation_not_in_the_guides_format_gives_nothing(value: str) -> None:
    assert parse_vnpu_register(value) is None


def test_a_best_effort_vnpu_instance_asks_zero_cores_and_the_best_effort_policy() -> None:
    request = VNPUProfile().render(replace(CARD, core_percent=0, share_policy="best-effort"))

    assert request.resources["huawei.com/vnpu-cores"] == "0"
    assert request.resources["huawei.com/vnpu-memory.1Gi"] == "4"
    assert request.annotations["huawei.com/vnpu-soft-scheduler-policy"] == "best-effort"


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (FlexNPUProfile(), "FlexNPU has no best-effort instances"),
        (HAMiProfile(), "HAMi has no best-effort instances"),
        (VNPUProfile(mode="hard"), "best-effort instances in soft mode only"),
    ],
)
def test_profiles_without_best_effort_refuse_it_saying_so(profile, message) -> None:
    with pytest.raises(DriverRefused, match=message):
        profile.render(replace(CARD, core_percent=0, share_policy="best-effort"))
