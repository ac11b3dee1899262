"""Tokens: stored hashed, shown once, revoked at once, rate-limited, managed by operators and by a command."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client

from api.models import ApiToken
from labs.models import AuditEvent, Institution, InstitutionRole
from tests.api.conftest import TokenClient
from tests.factories import UserFactory


def test_only_a_digest_and_a_prefix_are_stored(make_token, world):
    secret = make_token(world["course"].institution)
    token = ApiToken.objects.get()
    assert secret not in (token.secret_sha256, token.prefix) and secret.startswith(token.prefix)
    assert TokenClient(secret).call("GET", "/api/v1/courses/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_wrong_secret_with_a_right_prefix_is_refused(make_token, world):
    secret = make_token(world["course"].institution)
    response = TokenClient(secret[:-2] + "xx").call("GET", "/api/v1/courses/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_too_many_requests_are_throttled_per_token(make_token, world, settings):
    settings.API_THROTTLE_RATE = "3/minute"
    busy, other = TokenClient(make_token(world["course"].institution)), TokenClient(make_token(world["course"].institution))
    assert [busy.call("GET", "/api/v1/courses/").status_code for _ in range(4)] == [200, 200, 200, 429]
    throttled = busy.call("GET", "/api/v1/courses/")
    assert throttled.json()["error"]["code"] == "throttled" and int(throttled["Retry-After"]) > 0
    assert other.call("GET", "/api/v1/courses/").status_code == 200


def test_the_command_prints_a_working_token_once(world):
    out = io.StringIO()
    call_command("api_token", "create", "--institution", "uni-test", "--name", "moodle", "--scopes", "courses:read", stdout=out)
    secret = out.getvalue().strip()
    assert TokenClient(secret).call("GET", "/api/v1/courses/").status_code == 200
    assert TokenClient(secret).call("GET", "/api/v1/sessions/").status_code == 403
    listing = io.StringIO()
    call_command("api_token", "list", stdout=listing)
    assert "moodle" in listing.getvalue() and secret not in listing.getvalue()
    call_command("api_token", "revoke", ApiToken.objects.get().prefix, stdout=io.StringIO())
    assert TokenClient(secret).call("GET", "/api/v1/courses/").status_code == 401


def test_the_command_refuses_unknown_scopes_and_institutions(world):
    with pytest.raises(CommandError, match="Unknown scopes"):
        call_command("api_token", "create", "--institution", "uni-test", "--name", "x", "--scopes", "root")
    with pytest.raises(CommandError, match="No institution"):
        call_command("api_token", "create", "--institution", "nope", "--name", "x", "--scopes", "courses:read")
    assert not ApiToken.objects.exists()


@pytest.fixture
def operators(world):
    institution = world["course"].institution
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=institution, role="operator")
    elsewhere = Institution.objects.create(name="Elsewhere University", slug="elsewhere")
    foreign = UserFactory(username="foreign-op")
    InstitutionRole.objects.create(user=foreign, institution=elsewhere, role="operator")
    platform = UserFactory(username="platform")
    platform.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    return {"operator": operator, "foreign": foreign, "platform": platform, "elsewhere": elsewhere}


def logged_in(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def csrf_post(client: Client, url: str, data: dict):
    client.get(url)
    return client.post(url, {**data, "csrfmiddlewaretoken": client.cookies["csrftoken"].value})


def test_an_operator_makes_a_token_for_their_institution_and_sees_it_once(operators, world):
    client = logged_in(operators["operator"])
    institution = world["course"].institution
    response = csrf_post(
        client, "/ops/tokens/", {"institution": institution.pk, "name": "Moodle", "scopes": ["courses:read", "roster:write"]}
    )
    assert response.status_code == 200
    token = ApiToken.objects.get()
    assert token.scopes == ["courses:read", "roster:write"] and token.created_by == operators["operator"]
    html = response.content.decode()
    secret = html.split('<code class="token-secret">')[1].split("<")[0]
    assert TokenClient(secret).call("GET", "/api/v1/courses/").status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert secret not in client.get("/ops/tokens/").content.decode()
    assert AuditEvent.objects.filter(action="api_token.create", actor=operators["operator"]).exists()


def test_an_operator_cannot_make_or_see_tokens_of_another_institution(operators, make_token, world):
    make_token(operators["elsewhere"], name="their-lms")
    client = logged_in(operators["operator"])
    page = client.get("/ops/tokens/").content.decode()
    assert "their-lms" not in page
    response = csrf_post(
        client, "/ops/tokens/", {"institution": operators["elsewhere"].pk, "name": "x", "scopes": ["courses:read"]}
    )
    assert response.status_code == 200 and ApiToken.objects.count() == 1
    theirs = ApiToken.objects.get()
    assert client.get(f"/ops/tokens/{theirs.pk}/revoke/").status_code == 404
    assert logged_in(operators["platform"]).get("/ops/tokens/").content.decode().count("their-lms") == 1


def test_revoking_asks_for_confirmation_and_a_reason(operators, make_token, world):
    secret = make_token(world["course"].institution)
    token = ApiToken.objects.get()
    client = logged_in(operators["operator"])
    url = f"/ops/tokens/{token.pk}/revoke/"
    unconfirmed = csrf_post(client, url, {"reason": "leaked"})
    assert unconfirmed.status_code == 200
    assert TokenClient(secret).call("GET", "/api/v1/courses/").status_code == 200
    confirmed = csrf_post(client, url, {"reason": "leaked", "confirm": "on"})
    assert confirmed.status_code == 302
    assert TokenClient(secret).call("GET", "/api/v1/courses/").status_code == 401
    assert AuditEvent.objects.get(action="api_token.revoke").after == {"reason": "leaked"}


def test_the_page_is_for_operators_only_and_needs_csrf(operators, world):
    assert Client().get("/ops/tokens/").status_code == 302
    assert logged_in(world["students"][0]).get("/ops/tokens/").status_code == 404
    client = logged_in(operators["operator"])
    forged = client.post("/ops/tokens/", {"institution": world["course"].institution.pk, "name": "x", "scopes": ["courses:read"]})
    assert forged.status_code == 403
    assert not ApiToken.objects.exists()


def test_the_page_speaks_chinese(operators, world):
    client = logged_in(operators["operator"])
    page = client.get("/ops/tokens/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "API 令牌" in page


def test_an_operator_makes_an_oauth_client_and_revokes_it(operators, world):
    from tests.api.test_oauth import access_token

    client = logged_in(operators["operator"])
    institution = world["course"].institution
    response = csrf_post(
        client,
        "/ops/tokens/",
        {"kind": "oauth", "oauth-institution": institution.pk, "oauth-name": "Canvas", "oauth-scopes": ["usage:read"]},
    )
    assert response.status_code == 200
    html = response.content.decode()
    client_id = html.split('<code class="client-id">')[1].split("<")[0]
    secret = html.split('<code class="client-secret">')[1].split("<")[0]
    token = access_token(client_id, secret)
    assert token.status_code == 200 and token.json()["scope"] == "usage:read"
    assert secret not in client.get("/ops/tokens/").content.decode()
    from api.models import OAuthClient

    oauth_client = OAuthClient.objects.get()
    assert csrf_post(client, f"/ops/tokens/oauth/{oauth_client.pk}/revoke/", {"reason": "r", "confirm": "on"}).status_code == 302
    assert not OAuthClient.objects.exists()
    assert AuditEvent.objects.filter(action__startswith="oauth_client.").count() == 2
    assert logged_in(operators["foreign"]).get(f"/ops/tokens/oauth/{oauth_client.pk}/revoke/").status_code == 404
