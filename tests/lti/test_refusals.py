"""Every launch the tool must refuse: a clear error page, and nothing created."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model

from labs.models import Course, Enrollment, LabSession
from lti.models import Context, Identity
from tests.lti.platform import CLAIM, new_rsa_key

pytestmark = pytest.mark.django_db(transaction=True)


def _counts():
    return (
        get_user_model().objects.count(),
        Course.objects.count(),
        Enrollment.objects.count(),
        LabSession.objects.count(),
        Identity.objects.count(),
        Context.objects.count(),
    )


def _refused(response, text: str) -> None:
    assert response.status_code in (400, 403), response.status_code
    assert "LTI launch refused" in response.text
    assert text in response.text


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"iss": "https://other-lms.example"}, "not registered"),
        ({"aud": "someone-elses-client"}, "not registered"),
        ({"exp": int(time.time()) - 60, "iat": int(time.time()) - 400}, "could not be verified"),
        ({CLAIM + "deployment_id": "unknown-deployment"}, "deployment"),
        ({"roles": []}, "no role in this course"),
        ({CLAIM + "roles": None}, "no role in this course"),
        ({CLAIM + "version": "1.1"}, "could not be verified"),
    ],
    ids=["wrong-issuer", "wrong-audience", "expired", "unknown-deployment", "no-roles", "roles-claim-missing", "wrong-version"],
)
def test_a_bad_launch_is_refused_and_creates_nothing(browser, spec, text):
    before = _counts()

    response = browser.launch(**spec)

    _refused(response, text)
    assert _counts() == before
    assert browser.get("/").url.endswith("/accounts/login/?next=/")  # not logged in


def test_a_launch_signed_with_another_key_is_refused(browser, platform):
    before = _counts()
    platform.next_signing_key = new_rsa_key()  # same kid, wrong key

    _refused(browser.launch(), "could not be verified")
    assert _counts() == before


def test_a_replayed_launch_is_refused(browser, platform):
    platform.next_launch = {"sub": "learner-1"}
    auth = browser.authenticate()
    assert browser.post_launch(auth).status_code == 302
    before = _counts()

    replay = browser.post_launch(auth)

    _refused(replay, "already used")
    assert _counts() == before


def test_a_replayed_id_token_from_another_browser_is_refused(browser, platform, live_server):
    auth = browser.authenticate()
    assert browser.post_launch(auth).status_code == 302
    thief = type(browser)(live_server.url, platform)

    _refused(thief.post_launch(auth), "already used")


def test_a_launch_without_login_state_is_refused(browser, platform):
    auth = browser.authenticate()
    browser.http.cookies.clear()
    before = _counts()

    _refused(browser.post_launch(auth), "already used")
    assert _counts() == before


def test_an_unregistered_platform_gets_an_error_at_login(browser, platform):
    response = browser.http.get(
        browser.tool_url + "/lti/login/", params=platform.login_params(iss="https://nobody.example"), timeout=10
    )

    _refused(response, "not registered")


def test_another_institutions_registration_of_the_same_issuer_cannot_launch_as_its_users(live_server, platform, registration):
    """An LMS account is found by (issuer, subject). A registration of the same issuer by another
    institution, with keys of its own (possible before such registrations were refused: made here
    without the service's check), signs a launch as one of the first institution's instructors:
    refused, and nobody is logged in as that instructor."""
    from lti.models import Registration
    from tests.factories import InstitutionFactory
    from tests.lti.conftest import Browser
    from tests.lti.platform import INSTRUCTOR, Platform

    assert Browser(live_server.url, platform).launch(sub="teacher-1", roles=INSTRUCTOR).status_code == 302
    victim_course = Context.objects.get(registration=registration).course
    evil = Platform(tool_jwks_url=live_server.url + "/lti/jwks/", client_id="evil-client", deployment_id="evil-dep").start()
    try:
        other = Registration.objects.create(
            institution=InstitutionFactory(slug="evil-uni", name="Evil U"),
            name="Evil",
            issuer=platform.issuer,
            client_id="evil-client",
            auth_login_url=evil.url + "/auth",
            auth_token_url=evil.url + "/token",
            keyset_url=evil.url + "/jwks",
        )
        other.deployments.create(deployment_id="evil-dep")
        evil.context = {"id": "evil-ctx", "label": "EVIL", "title": "evil"}
        attacker = Browser(live_server.url, evil)
        evil.next_launch = {"iss": platform.issuer, "sub": "teacher-1", "roles": INSTRUCTOR}
        before = _counts()

        response = attacker.post_launch(attacker.authenticate(iss=platform.issuer))

        _refused(response, "belongs to another institution")
        assert _counts() == before
        assert attacker.get(f"/courses/{victim_course.pk}/edit/").url.endswith(
            f"/accounts/login/?next=/courses/{victim_course.pk}/edit/"
        )
    finally:
        evil.stop()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_login_naming_the_lms_with_a_nul_byte_is_refused_as_an_unregistered_one(browser, platform, method):
    """No registration can hold a NUL byte (PostgreSQL's text cannot): such a login is an unknown LMS."""
    for params in (platform.login_params(iss=platform.issuer + "\x00"), platform.login_params(client_id="\x00")):
        url = browser.tool_url + "/lti/login/"
        response = browser.http.request(method, url, **({"params": params} if method == "GET" else {"data": params}), timeout=10)

        _refused(response, "not registered")


def test_a_launch_with_a_nul_byte_in_its_issuer_deployment_or_state_is_refused_and_creates_nothing(browser, platform):
    before = _counts()

    _refused(browser.launch(iss=platform.issuer + "\x00"), "not registered")
    _refused(browser.launch(**{CLAIM + "deployment_id": "1\x00"}), "deployment")
    _refused(browser.post_launch({**browser.authenticate(), "state": "\x00"}), "already used")
    assert _counts() == before
