"""Over HTTPS the login's cookies cross sites: the state and launch-session cookies are SameSite=None; Secure,
and the launch data is bound to the browser that logged in."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.test import Client

from lti.models import Identity

pytestmark = pytest.mark.django_db(transaction=True)


def _login(client: Client, platform) -> dict:
    params = platform.login_params(target_link_uri="https://testserver/lti/launch/", lti1p3_new_window="1")
    response = client.get("/lti/login/", params, secure=True)
    assert response.status_code == 302
    for name in ("lti1p3-session-id",) + tuple(n for n in response.cookies if n.startswith("lti1p3-state-")):
        cookie = response.cookies[name]
        assert cookie["samesite"] == "None" and cookie["secure"] and cookie["httponly"], name
    assert any(n.startswith("lti1p3-state-") for n in response.cookies)
    query = {k: v[0] for k, v in parse_qs(urlsplit(response["Location"]).query).items()}
    assert query["redirect_uri"] == "https://testserver/lti/launch/"
    return requests.get(response["Location"], timeout=10).json()


def test_an_https_launch_uses_cross_site_cookies_and_works(registration, platform):
    client = Client()
    auth = _login(client, platform)

    response = client.post("/lti/launch/", {"id_token": auth["id_token"], "state": auth["state"]}, secure=True)

    assert response.status_code == 302 and response["Location"] == "/"
    assert Identity.objects.filter(subject="student-1").exists()


def test_an_https_launch_from_another_browser_is_refused(registration, platform):
    auth = _login(Client(), platform)
    other = Client()

    response = other.post("/lti/launch/", {"id_token": auth["id_token"], "state": auth["state"]}, secure=True)

    assert response.status_code == 400
    assert re.search(r"LTI launch refused", response.content.decode())
    assert not Identity.objects.exists()
