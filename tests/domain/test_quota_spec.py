"""The quota's one rule (labs.domain.quota_spec): each field's range and grid, and the rules
across fields, checked without Django."""

from __future__ import annotations

import pytest

from labs.domain.quota_spec import (
    FIELD,
    MAX_SESSIONS_PER_STUDENT,
    QUOTA_FIELDS,
    QUOTA_SPEC,
    AllotmentRoom,
    ClusterCaps,
    Holder,
    QuotaContext,
    Resource,
    quota_errors,
)
from labs.domain.units import Scenario

GIB = 1024
VALID = {
    "instance_count": 16,
    "core_percent": 160,
    "memory_mib": 64 * GIB,
    "cohort": "",
    "borrow_instances": None,
    "borrow_core_percent": None,
    "borrow_memory_mib": None,
    "lend_instances": None,
    "lend_core_percent": None,
    "lend_memory_mib": None,
    "sessions_per_student": 1,
    "max_session_minutes": 180,
    "extensions_allowed": 0,
    "extension_minutes": 30,
    "budget_core_percent_hours": None,
    "budget_gib_hours": None,
    "host_cpu_cap_millicores": None,
    "host_memory_cap_mib": None,
}
EIGHT_CARDS = ClusterCaps(cards=8, instances=128, core_percent=800, memory_mib=512 * GIB)


def messages(values: dict, context: QuotaContext | None = None) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for error in quota_errors(values, context):
        found.setdefault(error.field, []).append(str(error))
    return found


def test_the_spec_names_every_field_once():
    assert set(VALID) == set(QUOTA_FIELDS) and len(QUOTA_FIELDS) == len(QUOTA_SPEC) == 18
    assert messages(VALID) == {}


@pytest.mark.parametrize("spec", [f for f in QUOTA_SPEC if f.minimum is not None], ids=lambda f: f.name)
def test_each_number_is_refused_just_outside_its_range_and_taken_at_its_ends(spec):
    context = QuotaContext()
    below = messages({**VALID, spec.name: spec.minimum - 1}, context)
    above = messages({**VALID, spec.name: spec.top + (spec.grid_mib or 1)}, context)

    assert below == {spec.name: [f"Ensure this value is greater than or equal to {spec.minimum}."]}
    assert above == {spec.name: [f"Ensure this value is less than or equal to {spec.top}."]}
    assert spec.name not in messages({**VALID, "cohort": "ai", spec.name: spec.minimum}, context)
    ends = messages({**VALID, "cohort": "ai", spec.name: spec.top}, context)
    assert ends.get(spec.name, []) in ([], ["A course cannot lend more than it is guaranteed."])


def test_memory_is_on_the_128_mib_grid_or_the_clusters_coarser_step():
    assert messages({**VALID, "memory_mib": 1000}) == {
        "memory_mib": ["Memory is reserved in steps of 0.125 GiB: use 0.875 GiB or 1 GiB."]
    }
    assert messages({**VALID, "memory_mib": 1152}) == {}
    on_vnpu = QuotaContext(memory_step_mib=GIB)
    assert messages({**VALID, "memory_mib": 1152, "borrow_memory_mib": 1152, "cohort": "ai"}, on_vnpu) == {
        "memory_mib": ["Memory is reserved in steps of 1 GiB: use 1 GiB or 2 GiB."],
        "borrow_memory_mib": ["Memory is reserved in steps of 1 GiB: use 1 GiB or 2 GiB."],
    }
    assert "host_memory_cap_mib" not in messages({**VALID, "host_memory_cap_mib": 1000})  # host RAM has no grid


def test_a_course_lends_at_most_its_guarantee_and_borrows_and_lends_only_in_a_cohort():
    over = {**VALID, "cohort": "ai", "lend_instances": 17, "lend_core_percent": 160}
    assert messages(over) == {"lend_instances": ["A course cannot lend more than it is guaranteed."]}
    alone = {**VALID, "borrow_memory_mib": 1024, "lend_instances": 0, "lend_core_percent": 5}
    assert messages(alone) == {
        "borrow_memory_mib": ["Borrowing and lending happen inside a cohort: name the cohort, or leave this empty."],
        "lend_core_percent": ["Borrowing and lending happen inside a cohort: name the cohort, or leave this empty."],
    }


def test_the_cluster_caps_the_guarantee_by_the_templates_scenario():
    big = {**VALID, "instance_count": 129, "core_percent": 801, "memory_mib": 513 * GIB}
    assert messages(big, QuotaContext(caps=EIGHT_CARDS)) == {
        "instance_count": ["The cluster's 8 healthy cards hold at most 128 development instances (16 per card, 128 per node)."],
        "core_percent": ["The cluster's 8 healthy cards have 800 % of AI Core in all (100 % per card)."],
        "memory_mib": ["The cluster's 8 healthy cards have 512 GiB of memory in all."],
    }
    inference = ClusterCaps(cards=8, instances=64, core_percent=800, memory_mib=512 * GIB, scenario=Scenario.INFERENCE)
    assert messages({**VALID, "instance_count": 65}, QuotaContext(caps=inference)) == {
        "instance_count": ["The cluster's 8 healthy cards hold at most 64 inference instances (8 per card, 64 per node)."]
    }
    assert messages({**VALID, "instance_count": 128}, QuotaContext(caps=EIGHT_CARDS)) == {}


def test_the_allotment_caps_the_guarantee_after_the_cluster_does():
    room = AllotmentRoom(
        limit={Resource.INSTANCES: 160, Resource.CORE_PERCENT: None, Resource.MEMORY_MIB: 600 * GIB},
        others={Resource.INSTANCES: 128, Resource.CORE_PERCENT: 800, Resource.MEMORY_MIB: 100 * GIB},
        left={Resource.INSTANCES: 32, Resource.CORE_PERCENT: None, Resource.MEMORY_MIB: 500 * GIB},
    )
    values = {**VALID, "instance_count": 33, "core_percent": 5000, "memory_mib": 513 * GIB}
    assert messages(values, QuotaContext(caps=EIGHT_CARDS, allotment=room)) == {
        "instance_count": [
            "Your institution may guarantee 160 in total; its other courses hold 128, so at most 32 is left for this course."
        ],
        "core_percent": ["The cluster's 8 healthy cards have 800 % of AI Core in all (100 % per card)."],
        # one message a field: over the cluster already, the allotment is not said again
        "memory_mib": ["The cluster's 8 healthy cards have 512 GiB of memory in all."],
    }


def test_a_cohort_is_a_slug_of_this_institution():
    assert messages({**VALID, "cohort": "ai dept"}) == {
        "cohort": ["Enter a valid “slug” consisting of letters, numbers, underscores or hyphens."]
    }
    assert messages({**VALID, "cohort": "a" * 65}) == {"cohort": ["Ensure this value has at most 64 characters."]}
    assert messages({**VALID, "cohort": "ai-dept"}, QuotaContext(cohort_taken=True)) == {
        "cohort": ["Another institution has a cohort of this name; choose another name."]
    }


def test_a_wrong_type_or_an_empty_required_value_is_refused_and_an_unknown_field_is_a_programming_error():
    assert messages({**VALID, "sessions_per_student": "2", "instance_count": True, "core_percent": None}) == {
        "instance_count": ["Enter a whole number."],
        "core_percent": ["This field is required."],
        "sessions_per_student": ["Enter a whole number."],
    }
    with pytest.raises(ValueError, match="unknown quota fields"):
        quota_errors({**VALID, "gpus": 1})


def test_the_limits_are_the_named_constants():
    assert FIELD["sessions_per_student"].maximum == MAX_SESSIONS_PER_STUDENT == 16
    assert FIELD["memory_mib"].top == 2**63 - 128 and FIELD["instance_count"].maximum == 2**31 - 1


def test_a_guarantee_must_fit_beside_the_other_courses_and_the_refusal_names_them():
    caps = ClusterCaps(cards=8, instances=128, core_percent=800, memory_mib=512 * GIB)
    held = (
        Holder("AI101", {Resource.INSTANCES: 96, Resource.CORE_PERCENT: 600, Resource.MEMORY_MIB: 256 * GIB}),
        Holder("", {Resource.INSTANCES: 32, Resource.CORE_PERCENT: 100, Resource.MEMORY_MIB: 0}),
    )
    context = QuotaContext(caps=caps, held=held)

    errors = quota_errors({**VALID, "instance_count": 1, "core_percent": 101, "memory_mib": 256 * GIB}, context)

    assert [(e.field, e.code) for e in errors] == [("instance_count", "held.instances"), ("core_percent", "held.core_percent")]
    assert str(errors[0]) == (
        "The cluster holds at most 128 development instances; other courses guarantee 128 of them "
        "(AI101: 96; courses of other institutions: 32), so at most 0 can be guaranteed to this course."
    )
    assert str(errors[1]) == (
        "The cluster's cards have 800 % of AI Core; other courses guarantee 700 % of it "
        "(AI101: 600 %; courses of other institutions: 100 %), so at most 100 % can be guaranteed to this course."
    )
    exactly_what_is_left = {**VALID, "instance_count": 0, "core_percent": 100, "memory_mib": 256 * GIB}
    assert quota_errors(exactly_what_is_left, context) == []


def test_with_overcommit_a_guarantee_past_the_other_courses_is_taken_but_never_past_the_cluster():
    caps = ClusterCaps(cards=8, instances=128, core_percent=800, memory_mib=512 * GIB)
    held = (Holder("AI101", {Resource.INSTANCES: 128, Resource.CORE_PERCENT: 800, Resource.MEMORY_MIB: 512 * GIB}),)
    context = QuotaContext(caps=caps, held=held, overcommit=True)

    assert quota_errors({**VALID, "instance_count": 32, "core_percent": 320}, context) == []
    assert [e.code for e in quota_errors({**VALID, "instance_count": 129}, context)] == ["cluster.instances"]
