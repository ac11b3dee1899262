"""Platform storage (lti_storage_target) through the ASGI application, as Daphne serves it: a
login that keeps its state and nonce in the LMS's frame, and a launch checked against what the
frame gives back, in a browser that keeps no cookie for the tool. (The postMessage exchange
itself runs in Chromium: tests/browser/test_lti_platform_storage.py.)"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model

from labs.models import Enrollment
from lti.models import Identity
from tests.asgi_client import BASE_URL, AsgiClient
from tests.lti.platform import Platform

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "could not confirm that this launch was started in this browser"


@pytest.fixture
def platform():
    lms = Platform(storage_target="_parent").start()
    yield lms
    lms.stop()


def data_attributes(html: str) -> dict[str, str]:
    return {name: unescape(value) for name, value in re.findall(r'data-([a-z-]+)="([^"]*)"', html)}


def storage_login(client: AsgiClient, platform: Platform) -> dict[str, str]:
    """The LMS opens the tool's login with lti_storage_target; returns what the page puts into the LMS's frame."""
    page = client.get("/lti/login/", params=platform.login_params(target_link_uri=BASE_URL + "/lti/launch/"))
    assert page.status_code == 200, page.text
    return data_attributes(page.text) | {"_csp": page.headers["Content-Security-Policy"], "_html": page.text}


def storage_launch(client: AsgiClient, platform: Platform, **spec) -> tuple[dict, dict, dict]:
    """Login, the platform's authentication, and the launch's first post; cookies the tool set are
    dropped, as a browser that blocks them in the frame does. Returns what the login stored, the
    platform's answer and what the launch's check page reads back."""
    platform.next_launch = spec
    stored = storage_login(client, platform)
    client.cookies.clear()
    auth = requests.get(stored["redirect"], timeout=10).json()
    form = {"id_token": auth["id_token"], "state": auth["state"], "lti_storage_target": auth["lti_storage_target"]}
    check = client.request("POST", "/lti/launch/", data=form)
    assert check.status_code == 200, check.text
    client.cookies.clear()
    return stored, auth, data_attributes(check.text)


def post_checked(client: AsgiClient, auth: dict, *, secret: str, nonce: str, origin: str | None = BASE_URL):
    """The check page's post: the values read back from the LMS's frame, from the tool's own origin."""
    data = {
        "id_token": auth["id_token"],
        "state": auth["state"],
        "lti_storage_target": auth["lti_storage_target"],
        "lti_storage_secret": secret,
        "lti_storage_nonce": nonce,
    }
    return client.request("POST", "/lti/launch/", data=data, headers={"Origin": origin} if origin else {})


def _counts():
    return (get_user_model().objects.count(), Identity.objects.count(), Enrollment.objects.count())


def test_a_login_with_a_storage_target_puts_state_and_nonce_into_the_lms_frame(registration, platform):
    stored = storage_login(AsgiClient(language="en"), platform)

    assert stored["lti-storage"] == "put" and stored["target"] == "_parent"
    assert stored["origin"] == platform.url  # the authentication URL's origin, and no other
    query = parse_qs(urlsplit(stored["redirect"]).query)
    assert stored["redirect"].startswith(platform.url + "/auth?")
    assert stored["state-key"] == "lti1p3-state-" + query["state"][0]
    assert stored["nonce-key"] == "lti1p3-nonce-" + query["nonce"][0] and stored["nonce-value"] == query["nonce"][0]
    assert len(stored["state-value"]) >= 32 and stored["state-value"] not in stored["redirect"]  # the secret stays in the browser
    assert '<script src="/static/lti/platform_storage.js"' in stored["_html"] and "<script>" not in stored["_html"]
    assert f"frame-ancestors {platform.url}" in stored["_csp"]


def test_a_launch_checked_through_platform_storage_signs_in_without_a_cookie(registration, platform):
    client = AsgiClient(language="en")
    stored, auth, check = storage_launch(client, platform, sub="cookieless")
    assert check["lti-storage"] == "get"
    assert (check["state-key"], check["nonce-key"], check["origin"]) == (stored["state-key"], stored["nonce-key"], platform.url)
    assert not Identity.objects.filter(subject="cookieless").exists()  # nothing before the check

    response = post_checked(client, auth, secret=stored["state-value"], nonce=stored["nonce-value"])

    assert response.status_code == 302 and response.headers["Location"] == "/", response.text
    assert Identity.objects.get(subject="cookieless").user.enrollments.count() == 1


@pytest.mark.parametrize(
    "wrong",
    [{"secret": "forged-secret"}, {"nonce": "another-nonce"}, {"origin": None}, {"origin": "http://lms.example"}],
    ids=["wrong-state-secret", "wrong-nonce", "no-origin", "another-sites-page"],
)
def test_a_launch_the_lms_frame_does_not_confirm_is_refused_and_creates_nothing(registration, platform, wrong):
    client = AsgiClient(language="en")
    stored, auth, _check = storage_launch(client, platform, sub="refused")
    before = _counts()
    values = {"secret": stored["state-value"], "nonce": stored["nonce-value"], "origin": BASE_URL} | wrong

    response = post_checked(client, auth, **values)

    assert response.status_code == 400 and REFUSED in response.text
    assert _counts() == before
    # The check is used up: the right values cannot be tried next.
    again = post_checked(client, auth, secret=stored["state-value"], nonce=stored["nonce-value"])
    assert again.status_code == 400 and _counts() == before


def test_a_checked_launch_cannot_be_replayed(registration, platform):
    client = AsgiClient(language="en")
    stored, auth, _check = storage_launch(client, platform, sub="once")
    assert post_checked(client, auth, secret=stored["state-value"], nonce=stored["nonce-value"]).status_code == 302
    before = _counts()

    replay = post_checked(AsgiClient(), auth, secret=stored["state-value"], nonce=stored["nonce-value"])

    assert replay.status_code == 400 and _counts() == before


def test_a_launch_in_the_lms_frame_offers_the_portal_in_a_new_window_signed_in_once(registration, platform):
    """The frame keeps no session cookie: its page posts a one-time token to a new window, which
    signs in (first-party, where cookies work). Used once, and only from the tool's own page."""
    client = AsgiClient(language="en")
    stored, auth, _check = storage_launch(client, platform, sub="framed")
    data = {
        "id_token": auth["id_token"],
        "state": auth["state"],
        "lti_storage_secret": stored["state-value"],
        "lti_storage_nonce": stored["nonce-value"],
    }
    framed = client.request("POST", "/lti/launch/", data=data, headers={"Origin": BASE_URL, "Sec-Fetch-Dest": "iframe"})
    assert framed.status_code == 200 and "data-lti-open" in framed.text
    token = re.search(r'name="handoff" value="([^"]+)"', framed.text).group(1)
    window = AsgiClient(language="en")  # the new window: none of the frame's cookies

    elsewhere = window.request("POST", "/lti/launch/window/", data={"handoff": token}, headers={"Origin": "http://lms.example"})
    signed_in = window.request("POST", "/lti/launch/window/", data={"handoff": token}, headers={"Origin": BASE_URL})
    again = AsgiClient().request("POST", "/lti/launch/window/", data={"handoff": token}, headers={"Origin": BASE_URL})

    assert elsewhere.status_code == 400 and "already used or has expired" in elsewhere.text
    assert signed_in.status_code == 302 and signed_in.headers["Location"] == "/"
    assert "Ada Lovelace" in window.get("/").text
    assert again.status_code == 400
