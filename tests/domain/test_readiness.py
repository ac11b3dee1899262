"""A node is ready for its device profile only when the vendor's preconditions hold (labs.domain.readiness)."""

from __future__ import annotations

import pytest

from labs.domain.readiness import NodeFacts, driver_version_tuple, node_readiness

VNPU_RESOURCES = {"huawei.com/vnpu-number": 160, "huawei.com/vnpu-cores": 800, "huawei.com/vnpu-memory.1Gi": 256}
FLEXNPU_RESOURCES = {
    "volcano.sh/flexnpu-num": 128,
    "volcano.sh/flexnpu-core.percentage": 800,
    "volcano.sh/flexnpu-memory.128mi": 4096,
}
READY_VNPU = NodeFacts(
    profile="vnpu",
    chip_types=("Ascend910B4",),
    driver_version="25.5.0",
    device_share=True,
    labels={"huawei.com/vnpu": "ready"},
    resources=VNPU_RESOURCES,
)


def code(facts: NodeFacts) -> str | None:
    reason = node_readiness(facts)
    return None if reason is None else reason.code


def vnpu(**changes) -> NodeFacts:
    return NodeFacts(**{**READY_VNPU.__dict__, **changes})


def test_a_vnpu_node_meeting_every_precondition_is_ready():
    assert node_readiness(READY_VNPU) is None
    assert node_readiness(vnpu(chip_types=("Ascend310P3",), driver_version="26.0.rc2")) is None


def test_a_vnpu_node_without_the_ready_label_is_not_ready():
    reason = node_readiness(vnpu(labels={"huawei.com/vnpu": "pending"}))
    assert reason.code == "readiness.vnpu_label"
    assert "huawei.com/vnpu=ready" in str(reason)
    assert code(vnpu(labels={})) == "readiness.vnpu_label"


def test_a_vnpu_node_with_device_share_off_is_not_ready():
    reason = node_readiness(vnpu(device_share=False))
    assert reason.code == "readiness.device_share_off"
    assert "npu-smi set -t device-share" in str(reason)


@pytest.mark.parametrize("resource", sorted(VNPU_RESOURCES))
def test_a_node_advertising_zero_of_a_resource_is_not_ready(resource):
    reason = node_readiness(vnpu(resources={**VNPU_RESOURCES, resource: 0}))
    assert reason.code == "readiness.resource_missing"
    assert resource in str(reason)


@pytest.mark.parametrize("chip", ["Ascend910C", "Ascend910B3", "Ascend910"])
def test_vnpu_runs_on_310p3_and_910b4_only(chip):
    reason = node_readiness(vnpu(chip_types=(chip,)))
    assert reason.code == "readiness.chip_unsupported"
    assert chip in str(reason) and "Ascend310P3, Ascend910B4" in str(reason)


@pytest.mark.parametrize("version", ["25.2.0", "25.5.rc1", "24.1.rc3"])
def test_vnpu_needs_hdk_25_5_0_or_newer(version):
    reason = node_readiness(vnpu(driver_version=version))
    assert reason.code == "readiness.driver_too_old"
    assert f"the NPU driver (HDK) is {version}; 25.5.0 or newer is needed" in str(reason)


def test_flexnpu_needs_snt9b_and_hdk_25_2_0():
    facts = NodeFacts(profile="flexnpu", chip_types=("Ascend910B3",), driver_version="25.2.0", resources=FLEXNPU_RESOURCES)
    assert node_readiness(facts) is None
    # FlexNPU asks neither the vNPU label nor device-share mode.
    assert node_readiness(NodeFacts(**{**facts.__dict__, "labels": {}, "device_share": False})) is None
    assert code(NodeFacts(**{**facts.__dict__, "chip_types": ("Ascend910C",)})) == "readiness.chip_unsupported"
    assert code(NodeFacts(**{**facts.__dict__, "chip_types": ("Ascend310P3",)})) == "readiness.chip_unsupported"
    assert code(NodeFacts(**{**facts.__dict__, "driver_version": "24.1.0"})) == "readiness.driver_too_old"


def test_facts_nobody_could_read_are_not_held_against_the_node():
    assert node_readiness(NodeFacts(profile="vnpu")) is None
    assert node_readiness(NodeFacts(profile="flexnpu", chip_types=("Ascend910B",))) is None


def test_the_earliest_installation_step_that_fails_is_the_reason():
    everything_wrong = vnpu(labels={}, device_share=False, resources={**VNPU_RESOURCES, "huawei.com/vnpu-cores": 0})
    assert code(everything_wrong) == "readiness.vnpu_label"
    assert code(vnpu(device_share=False, chip_types=("Ascend910C",))) == "readiness.device_share_off"


def test_a_driver_version_that_is_not_one_is_said_so():
    assert code(vnpu(driver_version="latest")) == "readiness.driver_unreadable"


@pytest.mark.parametrize(
    ("version", "expected"),
    [("25.5.0", (25, 5, 0)), ("25.5.rc1", (25, 5, -1)), ("23.0.rc3.b060", (23, 0, -1)), ("25", (25, 0, 0)), ("x.1", None)],
)
def test_driver_versions_compare_as_numbers_with_release_candidates_below_releases(version, expected):
    assert driver_version_tuple(version) == expected


def test_bad_facts_are_refused_at_the_boundary():
    with pytest.raises(ValueError, match="unknown device profile"):
        NodeFacts(profile="gpu")
    with pytest.raises(ValueError, match="whole number"):
        vnpu(resources={"huawei.com/vnpu-cores": -1})
    with pytest.raises(TypeError, match="device_share"):
        vnpu(device_share="yes")
