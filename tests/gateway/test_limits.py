"""Per student: requests per minute (Redis, shared by every web process) and the weekly token
budget, each refused with a 429 in OpenAI's error shape; a request's size is capped."""

from __future__ import annotations

from labs.gateway import MAX_REQUEST_BYTES
from labs.models import CourseEndpoint
from labs.services.gateway import endpoint_key_issue, token_usage_record
from tests.asgi_client import AsgiClient
from tests.conftest import free_port
from tests.gateway.conftest import chat


def post(endpoint_id: int, key: str, **kwargs):
    path, headers, body = chat(endpoint_id, key)
    kwargs.setdefault("json", body)
    return AsgiClient().request("POST", path, headers=headers, **kwargs)


def test_a_student_past_the_rate_limit_gets_429_and_others_do_not(class_endpoint, upstream):
    endpoint = class_endpoint["endpoint"]
    CourseEndpoint.objects.filter(pk=endpoint.pk).update(requests_per_minute=3)
    statuses = [post(endpoint.pk, class_endpoint["key"]).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    refused = post(endpoint.pk, class_endpoint["key"]).json()["error"]
    assert (refused["type"], refused["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    other = endpoint_key_issue(enrollment=class_endpoint["students"][1].enrollments.get())
    assert post(endpoint.pk, other).status_code == 200
    assert len(upstream.requests) == 4


def test_a_used_up_weekly_budget_is_refused_before_the_upstream(class_endpoint, upstream):
    endpoint, student = class_endpoint["endpoint"], class_endpoint["students"][0]
    CourseEndpoint.objects.filter(pk=endpoint.pk).update(weekly_tokens_per_student=100)
    token_usage_record(
        course_id=endpoint.course_id,
        student_id=student.pk,
        institution_id=endpoint.course.institution_id,
        prompt_tokens=60,
        completion_tokens=39,
    )
    assert post(endpoint.pk, class_endpoint["key"]).status_code == 200  # 99 of 100: one more request
    response = post(endpoint.pk, class_endpoint["key"])
    assert response.status_code == 429
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "insufficient_quota")
    assert "of 100 tokens" in error["message"]
    assert len(upstream.requests) == 1


def test_a_request_larger_than_the_cap_is_refused(class_endpoint, upstream):
    big = b'{"model": "fake-model", "prompt": "' + b"x" * MAX_REQUEST_BYTES + b'"}'
    response = post(class_endpoint["endpoint"].pk, class_endpoint["key"], content=big, json=None)
    assert response.status_code == 413
    assert upstream.requests == []


def test_a_body_that_is_not_a_json_object_is_refused(class_endpoint, upstream):
    for content in (b"not json", b"[1, 2]"):
        response = post(class_endpoint["endpoint"].pk, class_endpoint["key"], content=content, json=None)
        assert response.status_code == 400
    assert upstream.requests == []


def test_without_redis_the_gateway_refuses_rather_than_serve_unlimited(class_endpoint, upstream, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = post(class_endpoint["endpoint"].pk, class_endpoint["key"])
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "rate_limiter_unavailable"
    assert upstream.requests == []
