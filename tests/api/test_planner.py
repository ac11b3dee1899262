"""The planner in the LMS API, through the ASGI application: a course's plan as JSON and CSV, a
what-if class answered, another institution's course not found, bad input refused with the field
and a message."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from labs.models import CourseQuota
from labs.selectors.planner import monday_of

pytestmark = pytest.mark.django_db(transaction=True)


def asgi_get(token: str, path: str, **params) -> httpx.Response:
    from portal.asgi import application

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})

    return asyncio.run(go())


def next_tuesday() -> str:
    return (monday_of(timezone.localdate()) + timedelta(weeks=1, days=1)).isoformat()


@pytest.fixture
def token(world, make_token) -> str:
    return make_token(world["course"].institution, scopes=["usage:read"])


def plan_path(course) -> str:
    return f"/api/v1/courses/{course.pk}/planner/"


def what_if(world, **overrides) -> dict:
    query = {
        "template": world["small"].pk,
        "count": 4,
        "weekday": 1,
        "start": "10:00",
        "end": "12:00",
        "first": next_tuesday(),
        "last": next_tuesday(),
    }
    query.update(overrides)
    return query


def test_a_courses_plan_has_every_hour_of_the_weeks_asked_for(world, token):
    response = asgi_get(token, plan_path(world["course"]), weeks=2, first=next_tuesday())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["course"] == world["course"].pk
    assert body["first"] == (monday_of(timezone.localdate()) + timedelta(weeks=1)).isoformat()
    assert len(body["hours"]) == 2 * 168
    hour = body["hours"][0]
    assert hour["capacity"] == {"instances": 128, "core_percent": 800, "memory_mib": 8 * 65536}
    assert hour["card_types"][0]["chip_type"] == "Ascend910B"
    assert hour["fits"] is True


def test_the_plan_comes_as_csv(world, token):
    response = asgi_get(token, plan_path(world["course"]), format="csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert len(list(csv.DictReader(io.StringIO(response.text)))) == 168 * 2


def test_a_what_if_class_is_answered_hour_by_hour(world, token):
    response = asgi_get(token, plan_path(world["course"]) + "what-if/", **what_if(world))
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["verdict"], body["slots"], len(body["hours"])) == ("fits", 1, 2)
    assert body["hours"][0]["placed"] == 4 and body["hours"][0]["collisions"] == []


def test_a_class_beyond_the_quota_outside_any_cohort_says_why(world, token):
    CourseQuota.objects.filter(course=world["course"]).update(instance_count=10)
    body = asgi_get(token, plan_path(world["course"]) + "what-if/", **what_if(world, count=20)).json()
    assert body["verdict"] == "does_not_fit"
    assert body["hours"][0]["reason_code"] == "quota.instances"
    assert body["hours"][0]["reason"]


def test_another_institutions_course_is_not_found(world, elsewhere, make_token):
    other = make_token(elsewhere, scopes=["usage:read"])
    assert asgi_get(other, plan_path(world["course"])).status_code == 404
    assert asgi_get(other, plan_path(world["course"]) + "what-if/", **what_if(world)).status_code == 404


def test_a_token_without_the_scope_is_refused(world, make_token):
    token = make_token(world["course"].institution, scopes=["courses:read"])
    assert asgi_get(token, plan_path(world["course"])).status_code == 403


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"weeks": "27"}, "weeks", "Ensure this value is less than or equal to 26."),
        ({"weeks": ""}, "weeks", "Send a value, or leave the parameter out."),
        ({"history_weeks": "0"}, "history_weeks", "Ensure this value is greater than or equal to 1."),
        ({"first": "2000-01-03"}, "first", "Choose a date from a year ago to two years ahead."),
    ],
)
def test_a_bad_plan_query_is_refused_naming_the_field(world, token, params, field, message):
    response = asgi_get(token, plan_path(world["course"]), **params)
    assert response.status_code == 400
    assert json.loads(response.text)["error"]["fields"] == {field: [message]}


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"end": "09:00"}, "end", "A class must end after it starts."),
        ({"start": "25:00"}, "start", "This value does not match the required pattern."),
        ({"weekday": "7"}, "weekday", "Ensure this value is less than or equal to 6."),
        ({"template": "999999"}, "template", "Select a valid choice. That choice is not one of the available choices."),
        ({"last": "2000-01-01"}, "last", "Choose a date from a year ago to two years ahead."),
    ],
)
def test_a_bad_what_if_is_refused_naming_the_field(world, token, overrides, field, message):
    response = asgi_get(token, plan_path(world["course"]) + "what-if/", **what_if(world, **overrides))
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {field: [message]}
