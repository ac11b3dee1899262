"""The gateway opens a course's endpoint only to a live key of that course, and refuses before it
touches the upstream: through the portal's ASGI application."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from labs.services.gateway import endpoint_key_issue, endpoint_key_revoke
from tests.asgi_client import AsgiClient
from tests.gateway.conftest import chat, other_course_key


def post(endpoint_id: int, key: str | None, **extra):
    path, headers, body = chat(endpoint_id, key, **extra)
    return AsgiClient().request("POST", path, json=body, headers=headers)


def test_a_students_key_gets_the_models_answer(class_endpoint, upstream):
    response = post(class_endpoint["endpoint"].pk, class_endpoint["key"])
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"].startswith("word0")
    assert len(upstream.requests) == 1


def test_no_key_is_refused_before_the_upstream_is_asked(class_endpoint, upstream):
    response = post(class_endpoint["endpoint"].pk, None)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_api_key"
    assert upstream.requests == []


def test_a_wrong_key_is_refused(class_endpoint, upstream):
    key = class_endpoint["key"]
    wrong = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    for bad in (wrong, "sk-anything", "npk_short_x"):
        response = post(class_endpoint["endpoint"].pk, bad)
        assert response.status_code == 401, bad
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert upstream.requests == []


def test_a_revoked_key_and_a_replaced_one_stop_working(class_endpoint, upstream):
    old = class_endpoint["key"]
    new = endpoint_key_issue(enrollment=class_endpoint["enrollment"])
    assert post(class_endpoint["endpoint"].pk, old).status_code == 401
    assert post(class_endpoint["endpoint"].pk, new).status_code == 200
    endpoint_key_revoke(enrollment=class_endpoint["enrollment"])
    assert post(class_endpoint["endpoint"].pk, new).status_code == 401
    assert len(upstream.requests) == 1


def test_another_courses_key_is_forbidden(class_endpoint, upstream):
    key = other_course_key(class_endpoint["course"].institution)
    response = post(class_endpoint["endpoint"].pk, key)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "wrong_endpoint"
    assert upstream.requests == []


def test_a_removed_enrolment_takes_its_key_at_once(class_endpoint, upstream):
    class_endpoint["enrollment"].delete()
    assert post(class_endpoint["endpoint"].pk, class_endpoint["key"]).status_code == 401
    assert upstream.requests == []


def test_an_ended_or_archived_course_refuses_its_keys(class_endpoint, upstream):
    course = class_endpoint["course"]
    course.ends_on = timezone.localdate() - timedelta(days=1)
    course.save(update_fields=["ends_on"])
    response = post(class_endpoint["endpoint"].pk, class_endpoint["key"])
    assert (response.status_code, response.json()["error"]["code"]) == (403, "course_ended")
    course.ends_on, course.archived_at = None, timezone.now()
    course.save(update_fields=["ends_on", "archived_at"])
    assert post(class_endpoint["endpoint"].pk, class_endpoint["key"]).status_code == 403
    assert upstream.requests == []


def test_a_disabled_endpoint_refuses(class_endpoint, upstream):
    endpoint = class_endpoint["endpoint"]
    endpoint.enabled = False
    endpoint.save(update_fields=["enabled"])
    response = post(endpoint.pk, class_endpoint["key"])
    assert (response.status_code, response.json()["error"]["code"]) == (403, "endpoint_disabled")
    assert upstream.requests == []


def test_the_key_is_not_sent_upstream(class_endpoint, upstream):
    assert post(class_endpoint["endpoint"].pk, class_endpoint["key"]).status_code == 200
    _body, headers = upstream.requests[0]
    assert "authorization" not in headers
    assert class_endpoint["key"] not in str(headers)
