"""The quota limits the API's schema advertises are the ones the server enforces (issue 30): both
come from labs.domain.quota_spec, and a value just outside an advertised limit is refused with
a clear 400 that changes nothing, while one just inside passes it."""

from __future__ import annotations

import pytest
from django.test import Client

from labs.domain.quota_spec import FIELD, QUOTA_SPEC, QuotaField, Unit
from labs.models import CourseQuota

QUOTA = {
    "instance_count": 16,
    "core_percent": 160,
    "memory_mib": 64 * 1024,
    "sessions_per_student": 2,
    "max_session_minutes": 120,
}
NUMBERS = [spec for spec in QUOTA_SPEC if spec.unit is not Unit.TEXT]
# What a value at the top of its advertised range still meets: the cluster's caps (the 8-card
# node of ``world``) and lending within the guarantee, which the schema says in words.
BEYOND_THE_RANGE = {
    "instance_count": "The cluster's 8 healthy cards hold at most 128 development instances (16 per card, 128 per node).",
    "core_percent": "The cluster's 8 healthy cards have 800 % of AI Core in all (100 % per card).",
    "memory_mib": "The cluster's 8 healthy cards have 512 GiB of memory in all.",
    "lend_instances": "A course cannot lend more than it is guaranteed.",
    "lend_core_percent": "A course cannot lend more than it is guaranteed.",
    "lend_memory_mib": "A course cannot lend more than it is guaranteed.",
}


def advertised() -> dict:
    return Client().get("/api/v1/schema/?format=json").json()["components"]["schemas"]["Quota"]


def test_the_schema_advertises_each_quota_fields_limits_as_the_spec_says(db):
    schema = advertised()
    properties = schema["properties"]

    assert list(properties) == [spec.name for spec in QUOTA_SPEC]
    assert set(schema["required"]) == {spec.name for spec in QUOTA_SPEC if not spec.optional}
    for spec in NUMBERS:
        field = properties[spec.name]
        limits = {key: field.get(key) for key in ("minimum", "maximum", "multipleOf")}
        assert limits == {"minimum": spec.minimum, "maximum": spec.top, "multipleOf": spec.grid_mib}, spec.name
        assert ("null" in field["type"]) == (spec.optional and spec.default is None), spec.name
        if spec.optional:
            assert field.get("default") == spec.default, spec.name
    cohort = properties["cohort"]
    assert (cohort["type"], cohort["maxLength"], cohort["default"]) == ("string", FIELD["cohort"].max_length, "")


def put(api, course, values: dict):
    return api.call("PUT", f"/api/v1/courses/{course.pk}/quota/", {**QUOTA, **values}, headers={"If-Match": "*"})


def with_its_cohort(spec: QuotaField, value: int) -> dict:
    """``value`` for the field, in a cohort where borrowing and lending need one."""
    return {spec.name: value, **({"cohort": "ai-dept"} if spec.role in ("borrow", "lend") else {})}


@pytest.mark.parametrize("spec", NUMBERS, ids=lambda spec: spec.name)
def test_a_value_just_outside_an_advertised_limit_is_refused_and_changes_nothing(api, world, spec):
    course = world["course"]
    before = CourseQuota.objects.filter(course=course).values().get()
    outside = [
        (spec.minimum - 1, f"Ensure this value is greater than or equal to {spec.minimum}."),
        (spec.top + (spec.grid_mib or 1), f"Ensure this value is less than or equal to {spec.top}."),
    ]
    if spec.grid_mib is not None:
        outside.append((spec.grid_mib * 8 + 1, "Memory is reserved in steps of 0.125 GiB: use 1 GiB or 1.125 GiB."))

    for value, message in outside:
        response = put(api, course, with_its_cohort(spec, value))

        assert response.status_code == 400, (value, response.content)
        error = response.json()["error"]
        assert (error["code"], error["fields"]) == ("invalid", {spec.name: [message]}), value
        assert CourseQuota.objects.filter(course=course).values().get() == before


@pytest.mark.parametrize("spec", NUMBERS, ids=lambda spec: spec.name)
def test_a_value_just_inside_an_advertised_limit_passes_it(api, world, spec):
    course = world["course"]

    at_the_bottom = put(api, course, with_its_cohort(spec, spec.minimum))
    assert at_the_bottom.status_code == 200, at_the_bottom.content
    assert getattr(CourseQuota.objects.get(course=course), spec.name) == spec.minimum

    at_the_top = put(api, course, with_its_cohort(spec, spec.top))
    if spec.name in BEYOND_THE_RANGE:
        assert at_the_top.status_code == 400
        assert at_the_top.json()["error"]["fields"] == {spec.name: [BEYOND_THE_RANGE[spec.name]]}
        assert getattr(CourseQuota.objects.get(course=course), spec.name) == spec.minimum
    else:
        assert at_the_top.status_code == 200, at_the_top.content
        assert getattr(CourseQuota.objects.get(course=course), spec.name) == spec.top


def test_a_cohort_too_long_or_not_a_slug_is_refused_and_changes_nothing(api, world):
    course = world["course"]
    before = CourseQuota.objects.filter(course=course).values().get()

    too_long = put(api, course, {"cohort": "a" * (FIELD["cohort"].max_length + 1)})
    not_a_slug = put(api, course, {"cohort": "ai dept"})

    assert too_long.status_code == not_a_slug.status_code == 400
    assert too_long.json()["error"]["fields"] == {"cohort": ["Ensure this field has no more than 64 characters."]}
    assert not_a_slug.json()["error"]["fields"] == {
        "cohort": ["Enter a valid “slug” consisting of letters, numbers, underscores or hyphens."]
    }
    assert CourseQuota.objects.filter(course=course).values().get() == before
    assert put(api, course, {"cohort": "a" * FIELD["cohort"].max_length}).status_code == 200
