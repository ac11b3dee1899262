"""The server refuses what the schema refuses, and the schema says what the server refuses: a
page or page size out of its range, a body value of another JSON type than the schema's (no
coercion of 2026 into "2026"). Each refusal is a 400 naming the field, and changes nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from labs.models import Course
from webhooks.models import Subscription

LISTS = ["/api/v1/courses/", "/api/v1/templates/", "/api/v1/sessions/", "/api/v1/webhooks/"]


def parameters(operation: dict) -> dict[str, dict]:
    return {p["name"]: p["schema"] for p in operation["parameters"]}


@pytest.mark.parametrize("page_size", ["abc", "0", "-1", "501", "2.5", "", "9" * 5000])
def test_a_page_size_out_of_its_range_is_refused(api, world, page_size):
    for url in LISTS:
        response = api.call("GET", url, data={"page_size": page_size})
        assert response.status_code == 400, (url, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid" and "1 to 500" in error["fields"]["page_size"][0]


def test_a_page_size_in_range_is_taken(api, world):
    response = api.call("GET", "/api/v1/sessions/", data={"page_size": "500"})
    assert response.status_code == 200
    assert api.call("GET", "/api/v1/courses/", data={"page_size": "1", "page": "1"}).json()["count"] == 1


@pytest.mark.parametrize("page", ["abc", "0", "-3", "last", "1.0"])
def test_a_page_that_is_not_a_page_number_is_refused(api, world, page):
    response = api.call("GET", "/api/v1/courses/", data={"page": page})
    assert response.status_code == 400
    assert "page" in response.json()["error"]["fields"]


def test_a_page_past_the_last_is_not_found(api, world):
    assert api.call("GET", "/api/v1/courses/", data={"page": "2"}).status_code == 404
    assert api.call("GET", "/api/v1/courses/", data={"page": "9" * 5000}).status_code == 404


def test_a_course_filter_that_is_not_a_whole_number_is_refused(api, world):
    for course in ("1.5", "abc", "0"):
        response = api.call("GET", "/api/v1/sessions/", data={"course": course})
        assert response.status_code == 400, course
        assert "course" in response.json()["error"]["fields"]


def test_a_time_or_state_sent_empty_is_refused_and_an_empty_student_means_everyone(api, world):
    usage = f"/api/v1/courses/{world['course'].pk}/usage/"
    for url, name in [("/api/v1/sessions/", "until"), ("/api/v1/sessions/", "state"), (usage, "since"), (usage, "until")]:
        response = api.call("GET", url, data={name: ""})
        assert response.status_code == 400, (url, name)
        assert response.json()["error"]["fields"] == {name: ["Send a value, or leave the parameter out."]}
    assert api.call("GET", usage, data={"student": ""}).status_code == 200
    assert api.call("GET", "/api/v1/sessions/", data={"student": ""}).status_code == 200


@pytest.mark.parametrize(
    ("field", "value"), [("term", 2026), ("code", 101), ("title", 1.5), ("title", True), ("term", ["2026"])]
)
def test_a_number_where_the_schema_says_string_is_refused_and_nothing_is_made(api, world, field, value):
    body = {"code": "AI201", "title": "Deep learning", "term": "2027 Spring", field: value}
    response = api.call("POST", "/api/v1/courses/", body)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
    assert Course.objects.count() == 1


def test_a_string_where_the_schema_says_integer_is_refused(api, world):
    body = {"course": str(world["course"].pk), "template": world["small"].slug, "student": world["students"][0].username}
    response = api.call("POST", "/api/v1/sessions/", body)
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"course": ["A valid integer is required."]}
    assert api.call("POST", "/api/v1/sessions/", {**body, "course": 1.5}).status_code == 400


def test_a_string_or_number_where_the_schema_says_boolean_is_refused(api, world):
    body = {"url": "https://lms.example.edu/h", "event_types": ["session.ended"]}
    for active in ("yes", "false", 0, 1):
        response = api.call("POST", "/api/v1/webhooks/", {**body, "active": active})
        assert response.status_code == 400, active
        assert "active" in response.json()["error"]["fields"]
    response = api.call("POST", "/api/v1/webhooks/", {**body, "courses": [str(world["course"].pk)]})
    assert response.status_code == 400
    assert not Subscription.objects.exists()


def test_the_schema_declares_the_bounds_the_server_enforces(db):
    paths = Client().get("/api/v1/schema/?format=json").json()["paths"]
    listing = parameters(paths["/api/v1/sessions/"]["get"])
    assert listing["page_size"] == {"type": "integer", "minimum": 1, "maximum": 500}
    assert listing["page"] == {"type": "integer", "minimum": 1}
    assert listing["course"]["type"] == "integer" and listing["course"]["minimum"] == 1
    assert listing["student"]["maxLength"] == 150
    course_id = parameters(paths["/api/v1/courses/{course_id}/"]["get"])["course_id"]
    assert course_id["minimum"] == 1 and course_id["maximum"] == 2**63 - 1
    assert parameters(paths["/api/v1/sessions/"]["post"])["Idempotency-Key"]["maxLength"] == 255
    assert "400" in paths["/api/v1/courses/"]["get"]["responses"]
    quota = Client().get("/api/v1/schema/?format=json").json()["components"]["schemas"]["Quota"]["properties"]
    assert quota["sessions_per_student"]["maximum"] == 16 and quota["extensions_allowed"]["maximum"] == 20
