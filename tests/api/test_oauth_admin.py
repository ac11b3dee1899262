"""OAuth clients made, listed and revoked by a command; one access token inspected (RFC 7662)
or revoked (RFC 7009) by the client it was issued to, through the ASGI application. A client
learns nothing of another client's tokens and cannot revoke them."""

from __future__ import annotations

import base64
import io
import re

import pytest
from django.core.management import CommandError, call_command
from oauth2_provider.models import get_application_model

from api.models import OAuthClient
from api.oauth import oauth_client_create
from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)


def basic(client_id: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()}


def form(path: str, data: dict, headers: dict | None = None):
    return AsgiClient().request("POST", f"/api/v1/oauth/{path}/", data=data, headers=headers or {})


def access_token(client_id: str, secret: str) -> str:
    response = form("token", {"grant_type": "client_credentials"}, basic(client_id, secret))
    assert response.status_code == 200, response.text
    return response.json()["access_token"]


def courses(token: str) -> int:
    return AsgiClient().get("/api/v1/courses/", headers={"Authorization": f"Bearer {token}"}).status_code


def test_the_command_creates_lists_and_revokes_a_client(world):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "oauth_client",
        "create",
        "--institution",
        "uni-test",
        "--name",
        "canvas",
        "--scopes",
        "courses:read",
        stdout=out,
        stderr=err,
    )
    client_id = re.search(r"client_id: (\S+)", out.getvalue())[1]
    secret = re.search(r"client_secret: (\S+)", out.getvalue())[1]
    assert "shown only now" in err.getvalue()
    application = get_application_model().objects.get(client_id=client_id)
    assert application.client_secret != secret and secret not in application.client_secret  # stored hashed
    assert OAuthClient.objects.get(application=application).scopes == ["courses:read"]
    token = access_token(client_id, secret)
    assert courses(token) == 200

    listing = io.StringIO()
    call_command("oauth_client", "list", stdout=listing)
    assert client_id in listing.getvalue() and "canvas" in listing.getvalue() and secret not in listing.getvalue()

    call_command("oauth_client", "revoke", client_id, stdout=io.StringIO())
    assert courses(token) == 401
    assert not OAuthClient.objects.exists()


def test_bad_command_input_is_refused_and_makes_nothing(world):
    with pytest.raises(CommandError, match="Unknown scopes root"):
        call_command("oauth_client", "create", "--institution", "uni-test", "--name", "x", "--scopes", "root")
    with pytest.raises(CommandError, match="No institution"):
        call_command("oauth_client", "create", "--institution", "nope", "--name", "x", "--scopes", "courses:read")
    with pytest.raises(CommandError, match="No OAuth client"):
        call_command("oauth_client", "revoke", "nope")
    assert not OAuthClient.objects.exists()
    assert not get_application_model().objects.exists()


@pytest.fixture
def two_clients(world, elsewhere):
    ours, our_secret = oauth_client_create(institution=world["course"].institution, name="canvas", scopes=["courses:read"])
    theirs, their_secret = oauth_client_create(institution=elsewhere, name="moodle", scopes=["courses:read"])
    return (ours.application.client_id, our_secret), (theirs.application.client_id, their_secret)


def test_a_client_introspects_its_own_token_only(two_clients):
    (ours, our_secret), (theirs, their_secret) = two_clients
    token = access_token(ours, our_secret)
    seen = form("introspect", {"token": token}, basic(ours, our_secret))
    assert seen.status_code == 200, seen.text
    body = seen.json()
    assert body["active"] is True and body["client_id"] == ours and body["scope"] == "courses:read"
    assert form("introspect", {"token": token}, basic(theirs, their_secret)).json() == {"active": False}
    assert form("introspect", {"token": "no-such-token"}, basic(ours, our_secret)).json() == {"active": False}
    assert form("introspect", {"token": token}).status_code in (401, 403)
    assert form("introspect", {"token": token}, basic(ours, "wrong")).status_code in (401, 403)
    assert form("introspect", {}, basic(ours, our_secret)).status_code == 400


def test_a_client_revokes_its_own_token_only(two_clients):
    (ours, our_secret), (theirs, their_secret) = two_clients
    token = access_token(ours, our_secret)
    assert form("revoke", {"token": token}, basic(theirs, their_secret)).status_code == 200  # RFC 7009: no disclosure
    assert courses(token) == 200
    assert form("revoke", {"token": token}, basic(ours, our_secret)).status_code == 200
    assert courses(token) == 401
    assert form("introspect", {"token": token}, basic(ours, our_secret)).json() == {"active": False}
