"""Every API endpoint x every kind of caller: no token, a token without the scope, one with only
the scope, another institution's token with every scope, a revoked token and an expired one.

Without a usable token: 401. With the wrong scope: 403. Another institution's token finds none
of this institution's objects (404, never 403) and lists only its own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from api.models import ApiToken
from api.scopes import SCOPES
from labs.models import Course, LabSession
from tests.api.conftest import TokenClient
from webhooks.models import Delivery
from webhooks.services import subscription_create

QUOTA = {"instance_count": 4, "core_percent": 40, "memory_mib": 16384, "sessions_per_student": 1, "max_session_minutes": 60}

# method, path, scope, body, status with the scope, status for another institution's token
ENDPOINTS = [
    ("GET", "courses/", "courses:read", None, 200, 200),
    ("POST", "courses/", "courses:write", {"code": "NEW1", "title": "New", "term": "T"}, 201, 201),
    ("GET", "courses/{course}/", "courses:read", None, 200, 404),
    ("PUT", "courses/{course}/", "courses:write", {"code": "C1", "title": "t", "term": "T"}, 200, 404),
    ("PATCH", "courses/{course}/", "courses:write", {"title": "t2"}, 200, 404),
    ("DELETE", "courses/{course}/", "courses:write", None, 200, 404),
    ("GET", "courses/{course}/quota/", "courses:read", None, 200, 404),
    ("PUT", "courses/{course}/quota/", "courses:write", QUOTA, 200, 404),
    ("GET", "courses/{course}/templates/", "templates:read", None, 200, 404),
    ("POST", "courses/{course}/templates/", "courses:write", "{offer}", 200, 404),
    ("DELETE", "courses/{course}/templates/{template}/", "courses:write", None, 204, 404),
    ("GET", "templates/", "templates:read", None, 200, 200),
    ("GET", "courses/{course}/roster/", "roster:read", None, 200, 404),
    ("PUT", "courses/{course}/roster/", "roster:write", "{roster}", 200, 404),
    ("GET", "courses/{course}/usage/", "usage:read", None, 200, 404),
    ("GET", "courses/{course}/planner/", "usage:read", None, 200, 404),
    ("GET", "sessions/", "sessions:read", None, 200, 200),
    ("POST", "sessions/", "sessions:write", "{launch}", 201, 400),
    ("GET", "sessions/{session}/", "sessions:read", None, 200, 404),
    ("POST", "sessions/{session}/stop/", "sessions:write", None, 200, 404),
    ("GET", "sessions/{session}/progress", "sessions:read", None, 200, 404),
    ("GET", "webhooks/", "webhooks:read", None, 200, 200),
    ("POST", "webhooks/", "webhooks:write", {"url": "https://lms.example.edu/h", "event_types": ["session.ended"]}, 201, 201),
    ("GET", "webhooks/{webhook}/", "webhooks:read", None, 200, 404),
    ("PATCH", "webhooks/{webhook}/", "webhooks:write", {"active": False}, 200, 404),
    ("POST", "webhooks/{webhook}/secret/", "webhooks:write", None, 200, 404),
    ("GET", "webhooks/{webhook}/deliveries/", "webhooks:read", None, 200, 404),
    ("POST", "webhooks/{webhook}/deliveries/{delivery}/redeliver/", "webhooks:write", None, 202, 404),
    ("DELETE", "webhooks/{webhook}/", "webhooks:write", None, 204, 404),
]
CALLERS = ["no token", "wrong scope", "right scope", "other institution", "revoked", "expired"]


@pytest.fixture
def objects(world, elsewhere):
    course = world["course"]
    running = LabSession.objects.create(
        student=world["students"][3], course=course, template=world["small"], state="running", secret="x"
    )
    Course.objects.create(institution=elsewhere, code="THEIRS", title="theirs", term="T")
    subscription, _secret = subscription_create(
        institution=course.institution, url="https://lms.example.edu/h", event_types=["session.ended"]
    )
    delivery = Delivery.objects.create(subscription=subscription, event_type="session.ended", payload={}, state="failed")
    return {
        "webhook": subscription.pk,
        "delivery": delivery.pk,
        "course": course.pk,
        "session": running.pk,
        "roster": {"members": [{"username": world["instructor"].username, "role": "instructor"}]},
        "launch": {"course": course.pk, "template": world["small"].slug, "student": world["students"][0].username},
        "offer": {"template": world["small"].slug},
        "template": world["medium"].slug,
    }


def token_for(caller: str, scope: str, make_token, world, elsewhere) -> str | None:
    mine = world["course"].institution
    if caller == "no token":
        return None
    if caller == "wrong scope":
        return make_token(mine, [s for s in SCOPES if s != scope])
    if caller == "right scope":
        return make_token(mine, [scope])
    if caller == "other institution":
        return make_token(elsewhere, list(SCOPES))
    if caller == "revoked":
        secret = make_token(mine, [scope])
        ApiToken.objects.filter(institution=mine).update(revoked_at=timezone.now())
        return secret
    return make_token(mine, [scope], expires_at=timezone.now() - timedelta(minutes=1))


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(("method", "path", "scope", "body", "ok", "other"), ENDPOINTS, ids=[f"{e[0]} {e[1]}" for e in ENDPOINTS])
def test_authorization(caller, method, path, scope, body, ok, other, objects, make_token, world, elsewhere):
    client = TokenClient(token_for(caller, scope, make_token, world, elsewhere))
    if isinstance(body, str):
        body = objects[body.strip("{}")]
    url = "/api/v1/" + path.format(**objects)
    response = client.call(method, url, body, headers={"If-Match": "*"})
    expected = {
        "no token": 401,
        "wrong scope": 403,
        "right scope": ok,
        "other institution": other,
        "revoked": 401,
        "expired": 401,
    }[caller]
    assert response.status_code == expected, response.content
    if expected >= 400:
        assert response.json()["error"]["code"]
    if caller == "other institution" and method == "GET" and other == 200:
        listed = response.json()["results"]
        assert all(item.get("code") != world["course"].code and item.get("student") is None for item in listed)
