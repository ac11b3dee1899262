"""Inputs are checked where they enter the domain: wrong types, unknown values, out-of-range numbers."""

from __future__ import annotations

import pytest

from labs.domain.allocation import Refused, allocate
from labs.domain.placement import (
    CardCapacity,
    Instance,
    LaunchRequest,
    NodeCapacity,
    PlacementConfig,
    ScoreWeights,
)
from labs.domain.quota import CourseQuota, Resources
from labs.domain.units import Scenario
from tests.domain.test_engine import GIB, UNLIMITED, node, req

GOOD = {"key": "r", "course_id": 1, "student_id": 2, "core_percent": 5, "memory_mib": 4096}


@pytest.mark.parametrize(
    ("field", "value", "error", "words"),
    [
        ("core_percent", 5.5, TypeError, "core_percent must be an int"),
        ("core_percent", True, TypeError, "core_percent must be an int"),
        ("core_percent", None, TypeError, "core_percent must be an int"),
        ("core_percent", -5, ValueError, "core_percent must be >= 0"),
        ("memory_mib", 4096.0, TypeError, "memory_mib must be an int"),
        ("memory_mib", -128, ValueError, "memory_mib must be >= 0"),
        ("memory_mib", None, TypeError, "memory_mib must be an int"),
        ("scenario", "training", ValueError, "scenario must be one of development, inference"),
        ("share_policy", "bogus", ValueError, "share_policy must be one of fixed-share, elastic, best-effort"),
        ("node_policy", "tight", ValueError, "node_policy must be one of binpack, spread"),
        ("cards", 0, ValueError, "cards must be >= 1"),
        ("key", "", ValueError, "key must be a non-empty str"),
        ("key", 7, TypeError, "key must be a non-empty str"),
        ("course_id", None, TypeError, "course_id must be an int"),
        ("node_selector", {"pool": "a"}, TypeError, "node_selector must be a tuple"),
    ],
)
def test_a_launch_request_with_a_bad_field_is_rejected_naming_the_field(field, value, error, words):
    with pytest.raises(error, match=words):
        LaunchRequest(**{**GOOD, field: value})


def test_a_launch_request_accepts_enum_values_given_as_strings():
    request = LaunchRequest(**GOOD, scenario="inference", share_policy="best-effort", card_policy="spread")
    assert request.scenario is Scenario.INFERENCE and request.share_policy.value == "best-effort"
    assert request.card_policy.value == "spread"


@pytest.mark.parametrize(
    ("build", "error", "words"),
    [
        (lambda: ScoreWeights(-1, 1, 1), ValueError, "ScoreWeights.instances must be >= 0"),
        (lambda: ScoreWeights(1, 1.5, 1), TypeError, "ScoreWeights.core must be an int"),
        (lambda: PlacementConfig(node_policy="bogus"), ValueError, "node_policy must be one of binpack, spread"),
        (lambda: PlacementConfig(weights=(1, 1, 1)), TypeError, "weights must be a ScoreWeights"),
        (lambda: PlacementConfig(min_runtime_seconds=-1), ValueError, "min_runtime_seconds must be >= 0"),
        (lambda: Instance(101, 128, Scenario.DEVELOPMENT), ValueError, "core_percent must be between 0 and 100"),
        (lambda: Instance(5, 128.0, Scenario.DEVELOPMENT), TypeError, "memory_mib must be an int"),
        (lambda: Instance(5, 128, "training"), ValueError, "scenario must be one of"),
        (lambda: Instance(50, 128, Scenario.DEVELOPMENT, key="w", cards=2), ValueError, "core_percent must be 100"),
        (lambda: Instance(100, 128, Scenario.DEVELOPMENT, cards=2), ValueError, "key"),
        (lambda: CardCapacity(1, 0, "64"), TypeError, "memory_mib must be an int"),
        (lambda: CardCapacity(1, -1, 1024), ValueError, "index must be >= 0"),
        (lambda: CardCapacity(1, 0, 1024, instances=("x",)), TypeError, "instances must hold Instance"),
        (lambda: NodeCapacity("a", (), memory_granule_mib=100), ValueError, "memory_granule_mib must be a positive multiple"),
        (lambda: NodeCapacity("a", (CardCapacity(1, 0, 1024), CardCapacity(2, 0, 1024))), ValueError, "card index 0"),
        (lambda: NodeCapacity("", ()), ValueError, "name must be a non-empty str"),
        (lambda: Resources(-1, 0, 0), ValueError, "core_percent must be >= 0"),
        (lambda: Resources(1, 2.0, 0), TypeError, "memory_mib must be an int"),
        (lambda: CourseQuota((1, 2, 3)), TypeError, "guarantee must be a Resources"),
        (lambda: CourseQuota(Resources(1, 2, 3), sessions_per_student=-1), ValueError, "sessions_per_student must be >= 0"),
        (lambda: CourseQuota(Resources(1, 2, 3), allowed_templates={1}), TypeError, "allowed_templates must be a frozenset"),
    ],
)
def test_capacity_config_and_quota_records_reject_bad_values(build, error, words):
    with pytest.raises(error, match=words):
        build()


def test_a_size_off_every_nodes_memory_step_is_refused_not_left_waiting():
    vnpu = [node("v", granule=1024), node("w", granule=1024, available=False)]
    (decision,) = allocate(vnpu, [req("r", memory=1536)], {1: UNLIMITED}, {}, now=0)
    assert isinstance(decision, Refused)
    assert str(decision.reason) == "memory granularity: 1.5 GiB is not a multiple of the 1 GiB the nodes allocate in"


def test_a_size_some_node_could_take_waits_rather_than_being_refused():
    mixed = [node("v", granule=1024), node("f", granule=128, available=False)]
    (decision,) = allocate(mixed, [req("r", memory=1536)], {1: UNLIMITED}, {}, now=0)
    assert not isinstance(decision, Refused)


def test_a_valid_request_still_places():
    (decision,) = allocate([node("a")], [req("r", memory=4 * GIB)], {1: UNLIMITED}, {}, now=0)
    assert decision.node == "a"
