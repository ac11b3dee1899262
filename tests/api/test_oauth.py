"""OAuth 2.0 client credentials: an institution's LMS back end gets short-lived access tokens
within its client's scopes, and they act in its institution only."""

from __future__ import annotations

import base64

import pytest
from django.test import Client

from api.oauth import oauth_client_create
from labs.models import AuditEvent, Course
from tests.api.conftest import TokenClient


def access_token(client_id: str, secret: str, scope: str | None = None):
    basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    data = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
    return Client().post("/api/v1/oauth/token/", data, headers={"Authorization": f"Basic {basic}"})


@pytest.fixture
def lms(world):
    client, secret = oauth_client_create(
        institution=world["course"].institution, name="canvas", scopes=["courses:read", "courses:write"]
    )
    return client, secret


def test_a_client_gets_a_token_that_acts_in_its_institution(lms, world, elsewhere):
    client, secret = lms
    response = access_token(client.application.client_id, secret)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body["scope"].split()) == {"courses:read", "courses:write"}
    api = TokenClient(body["access_token"])
    assert api.call("GET", "/api/v1/courses/").json()["count"] == 1
    theirs = Course.objects.create(institution=elsewhere, code="T1", title="t", term="t")
    assert api.call("GET", f"/api/v1/courses/{theirs.pk}/").status_code == 404
    assert api.call("GET", "/api/v1/sessions/").status_code == 403
    created = api.call("POST", "/api/v1/courses/", {"code": "OA1", "title": "From Canvas", "term": "T"})
    assert created.status_code == 201
    assert AuditEvent.objects.filter(action="course.create", actor_name="oauth-client:uni-test/canvas").exists()


def test_a_narrower_scope_can_be_asked_for_but_not_a_wider_one(lms):
    client, secret = lms
    narrow = access_token(client.application.client_id, secret, "courses:read")
    assert narrow.status_code == 200
    assert (
        TokenClient(narrow.json()["access_token"])
        .call("POST", "/api/v1/courses/", {"code": "X", "title": "x", "term": "t"})
        .status_code
        == 403
    )
    wide = access_token(client.application.client_id, secret, "sessions:write")
    assert wide.status_code == 400
    assert wide.json()["error"] == "invalid_scope"


def test_a_wrong_secret_gets_no_token_and_a_made_up_token_is_refused(lms):
    client, _secret = lms
    assert access_token(client.application.client_id, "wrong").status_code == 401
    response = TokenClient("not-a-real-access-token").call("GET", "/api/v1/courses/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"


def test_revoking_the_client_ends_its_tokens(lms, world):
    from api.oauth import oauth_client_revoke

    client, secret = lms
    token = access_token(client.application.client_id, secret).json()["access_token"]
    oauth_client_revoke(client=client, reason="moved to another LMS")
    assert TokenClient(token).call("GET", "/api/v1/courses/").status_code == 401
