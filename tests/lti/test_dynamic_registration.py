"""LTI Dynamic Registration through the ASGI application, against a platform over real HTTP: an
operator makes a one-time link, the LMS opens it, the tool reads the platform's configuration and
registers itself, and the registration refuses launches until the operator approves it."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from html import unescape

import pytest
import requests
from django.utils import timezone

from labs.models import AuditEvent, Institution, InstitutionRole
from lti.dynamic_registration import LINK_MAX_ATTEMPTS, link_create
from lti.models import Identity, Registration, RegistrationLink
from lti.services import registration_save
from lti.tasks import launch_data_prune_task
from tests.asgi_client import AsgiClient
from tests.factories import UserFactory
from tests.lti.conftest import hidden_inputs
from tests.lti.platform import Platform
from tests.lti.registrar import TOOL_CONFIGURATION, Registrar

pytestmark = pytest.mark.django_db(transaction=True)

TOOL = "http://testserver"
PENDING_EN = "a portal operator has not approved the registration yet"
USED_EN = "This registration link is unknown, used or expired"


@pytest.fixture
def platform():
    lms = Platform().start()
    yield lms
    lms.stop()


@pytest.fixture
def registrar(platform):
    return Registrar(platform).install()


@pytest.fixture
def home():
    institution = Institution.objects.create(name="Home University", slug="home")
    operator = UserFactory(username="home-op")
    InstitutionRole.objects.create(user=operator, institution=institution, role="operator")
    return {"institution": institution, "operator": operator}


def make_link(client: AsgiClient, institution: Institution) -> str:
    """The operator's click on "Make a registration link"; the path of the link the page shows once."""
    page = client.post("/ops/lti/links/", {"institution": institution.pk})
    assert page.status_code == 200, page.text
    assert page.headers["Cache-Control"] == "no-store"
    link = unescape(re.search(r'<code class="registration-link">([^<]+)</code>', page.text).group(1))
    assert link.startswith(TOOL + "/lti/register/")
    return link[len(TOOL) :]


def asgi_launch(client: AsgiClient, platform: Platform, *, check_cookies: bool = True, **spec) -> object:
    """A launch from the platform, the browser's side through the ASGI application: the login URL
    (its cookie check, unless skipped as the check's own second request does), the platform's
    authentication, the id_token posted to the launch URL."""
    params = platform.login_params(target_link_uri=TOOL + "/lti/launch/")
    if check_cookies:
        check = client.get("/lti/login/", params=params)
        if check.status_code != 200:
            return check
        params = hidden_inputs(check.text)
    else:
        params["lti1p3_new_window"] = "1"
    redirect = client.get("/lti/login/", params=params)
    assert redirect.status_code == 302, redirect.text
    platform.next_launch = spec
    auth = requests.get(redirect.headers["Location"], timeout=10).json()
    return client.post("/lti/launch/", {"id_token": auth["id_token"], "state": auth["state"]})


def test_an_lms_registers_through_the_link_and_launches_only_once_an_operator_approves(home, platform, registrar):
    operator = AsgiClient(user=home["operator"])
    link = make_link(operator, home["institution"])

    lms = AsgiClient()  # the LMS administrator's browser, in the LMS's frame
    page = lms.get(link + registrar.query())

    assert page.status_code == 200, page.text
    assert "data-registered" in page.text and "lti/registration_close.js" in page.text
    assert f"frame-ancestors {platform.url}" in page.headers["Content-Security-Policy"]
    # The platform got the registration token and the tool's configuration.
    assert registrar.authorizations == [f"Bearer {registrar.registration_token}"]
    (sent,) = registrar.received
    assert sent["initiate_login_uri"] == TOOL + "/lti/login/"
    assert sent["redirect_uris"] == [TOOL + "/lti/launch/"]
    assert sent["jwks_uri"] == TOOL + "/lti/jwks/"
    assert sent["token_endpoint_auth_method"] == "private_key_jwt"
    assert set(sent["scope"].split()) == {
        "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
        "https://purl.imsglobal.org/spec/lti-ags/scope/score",
        "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
    }  # what the tool uses, as far as the platform offers it
    tool = sent[TOOL_CONFIGURATION]
    assert tool["domain"] == "testserver" and tool["target_link_uri"] == TOOL + "/lti/launch/"
    assert {"LtiDeepLinkingRequest", "LtiResourceLinkRequest"} == {m["type"] for m in tool["messages"]}
    assert {"given_name", "family_name", "email"} <= set(tool["claims"])
    # Stored, waiting for approval, in the link's institution.
    registration = Registration.objects.get(issuer=platform.issuer, client_id=registrar.client_id)
    assert registration.state == Registration.State.PENDING
    assert registration.institution == home["institution"]
    assert registration.auth_login_url == platform.url + "/auth" and registration.keyset_url == platform.url + "/jwks"
    assert list(registration.deployments.values_list("deployment_id", flat=True)) == [registrar.deployment_id]
    assert registration.name == f"moodle ({platform.url.removeprefix('http://')})"
    assert AuditEvent.objects.filter(action="lti.registration.dynamic").exists()
    # The link was for one registration.
    again = lms.get(link + registrar.query())
    assert again.status_code == 400 and USED_EN in again.text

    # Pending: the login refuses with a clear message, and so does a launch that skips the check.
    student = AsgiClient()
    refused = asgi_launch(student, platform, sub="student-9")
    assert refused.request.url.path == "/lti/login/"  # before the LMS is asked to authenticate anyone
    assert refused.status_code == 403 and PENDING_EN in unescape(refused.text)
    refused = asgi_launch(student, platform, check_cookies=False, sub="student-9")
    assert refused.status_code == 403 and PENDING_EN in unescape(refused.text)
    assert not Identity.objects.exists()

    ops_page = operator.get("/ops/lti/")
    assert f'data-pending-registration="{registration.pk}"' in ops_page.text
    approved = operator.post(f"/ops/lti/{registration.pk}/approve/")
    assert approved.status_code == 302
    registration.refresh_from_db()
    assert registration.state == Registration.State.ACTIVE
    assert AuditEvent.objects.filter(action="lti.registration.approve", actor=home["operator"]).exists()

    launched = asgi_launch(student, platform, sub="student-9")
    assert launched.status_code == 302 and launched.headers["Location"] == "/"
    assert Identity.objects.filter(subject="student-9", registration=registration).exists()


def _open(home, registrar, **query) -> object:
    token = link_create(by=home["operator"], institution=home["institution"])
    return AsgiClient().get(f"/lti/register/{token}/" + registrar.query(**query))


def test_an_issuer_not_on_the_configurations_address_is_refused_before_registering(home, platform, registrar):
    registrar.issuer = "http://127.0.0.2:9"

    page = _open(home, registrar)

    assert page.status_code == 400
    assert "is not on the address of its OpenID configuration" in unescape(page.text)
    assert registrar.configurations_served == 1 and registrar.authorizations == []  # nothing posted
    assert not Registration.objects.exists()


def test_a_platform_that_refuses_the_registration_says_why_and_nothing_is_stored(home, platform, registrar):
    registrar.error_status = 400
    registrar.error_body = {"error": "invalid_redirect_uri", "error_description": "redirect_uris must be on tool.example"}

    page = _open(home, registrar)

    assert page.status_code == 400
    assert "The LMS refused: redirect_uris must be on tool.example" in unescape(page.text)
    assert not Registration.objects.exists()


def test_canvass_error_shape_is_read_too(home, platform, registrar):
    registrar.error_status = 422
    registrar.error_body = {"errors": ["Invalid redirect_uri"]}

    page = _open(home, registrar)

    assert page.status_code == 400 and "Invalid redirect_uri" in unescape(page.text)
    assert not Registration.objects.exists()


def test_a_wrong_registration_token_is_refused_by_the_platform(home, platform, registrar):
    page = _open(home, registrar, registration_token="not-the-one")

    assert page.status_code == 400 and "unknown registration token" in unescape(page.text)
    assert not Registration.objects.exists()


def test_a_registration_url_opened_without_openid_configuration_says_to_open_it_from_the_lms(home, registrar):
    token = link_create(by=home["operator"], institution=home["institution"])

    page = AsgiClient().get(f"/lti/register/{token}/")

    assert page.status_code == 400 and "did not send its OpenID configuration" in unescape(page.text)
    assert registrar.configurations_served == 0
    assert RegistrationLink.objects.get().attempts == 0  # no call was made: the link is still good


def test_a_second_registration_of_the_same_client_is_refused(home, platform, registrar):
    assert _open(home, registrar).status_code == 200

    page = _open(home, registrar)

    assert page.status_code == 400 and "This LMS client is registered with the portal already" in unescape(page.text)
    assert Registration.objects.count() == 1
    assert RegistrationLink.objects.filter(used_at__isnull=True).count() == 1  # the second link was not used up


def test_an_issuer_another_institution_has_is_refused_before_registering(home, platform, registrar):
    away = Institution.objects.create(name="Away", slug="away")
    fields = {
        "name": "Theirs",
        "issuer": platform.issuer,
        "client_id": "theirs",
        "auth_login_url": platform.url + "/auth",
        "auth_token_url": platform.url + "/token",
        "auth_audience": "",
        "keyset_url": platform.url + "/jwks",
    }
    registration_save(by=None, institution=away, fields=fields, deployment_ids=["1"])

    page = _open(home, registrar)

    assert page.status_code == 400 and "registered for another institution" in unescape(page.text)
    assert registrar.authorizations == []
    assert Registration.objects.count() == 1


def test_a_link_that_is_unknown_expired_or_opened_too_often_makes_no_call(home, platform, registrar):
    lms = AsgiClient()
    assert USED_EN in lms.get("/lti/register/no-such-token/" + registrar.query()).text

    token = link_create(by=home["operator"], institution=home["institution"])
    RegistrationLink.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert USED_EN in lms.get(f"/lti/register/{token}/" + registrar.query()).text
    assert registrar.configurations_served == 0

    token = link_create(by=home["operator"], institution=home["institution"])
    registrar.error_status = 500
    for _ in range(LINK_MAX_ATTEMPTS):
        assert "The LMS refused" in lms.get(f"/lti/register/{token}/" + registrar.query()).text
    registrar.error_status = 0
    assert USED_EN in lms.get(f"/lti/register/{token}/" + registrar.query()).text
    assert registrar.configurations_served == LINK_MAX_ATTEMPTS
    assert not Registration.objects.exists()


def test_a_configuration_on_a_private_address_is_not_fetched_where_those_are_refused(home, platform, registrar, settings):
    settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False

    page = _open(home, registrar)

    assert page.status_code == 400 and "local or private address" in unescape(page.text)
    assert registrar.configurations_served == 0
    assert not Registration.objects.exists()


def test_a_frame_ancestor_cannot_be_injected_through_the_configuration_url(home, registrar):
    token = link_create(by=home["operator"], institution=home["institution"])

    page = AsgiClient().get(f"/lti/register/{token}/", params={"openid_configuration": "https://a;script-src *@x.example/"})

    assert page.status_code == 400
    assert "script-src *" not in page.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]


def test_an_operator_rejects_a_pending_registration_and_cannot_touch_another_institutions(home, platform, registrar):
    assert _open(home, registrar).status_code == 200
    registration = Registration.objects.get()
    stranger = UserFactory(username="away-op")
    away = Institution.objects.create(name="Away", slug="away")
    InstitutionRole.objects.create(user=stranger, institution=away, role="operator")

    assert AsgiClient(user=stranger).post(f"/ops/lti/{registration.pk}/approve/").status_code == 404
    assert AsgiClient(user=stranger).post(f"/ops/lti/{registration.pk}/reject/").status_code == 404
    assert Registration.objects.get().state == Registration.State.PENDING

    rejected = AsgiClient(user=home["operator"]).post(f"/ops/lti/{registration.pk}/reject/")

    assert rejected.status_code == 302
    assert not Registration.objects.exists()
    assert AuditEvent.objects.filter(action="lti.registration.reject").exists()


def test_an_operator_makes_links_only_for_their_own_institution(home):
    away = Institution.objects.create(name="Away", slug="away")

    response = AsgiClient(user=home["operator"]).post("/ops/lti/links/", {"institution": away.pk})

    assert response.status_code == 302
    assert not RegistrationLink.objects.exists()


def test_the_hourly_prune_deletes_expired_links_and_keeps_live_ones(home):
    """``lti.tasks.launch_data_prune`` (beat, hourly), run as a worker runs it."""
    live = link_create(by=home["operator"], institution=home["institution"])
    link_create(by=home["operator"], institution=home["institution"])
    RegistrationLink.objects.exclude(token_sha256=hashlib.sha256(live.encode()).hexdigest()).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert launch_data_prune_task.apply().get() == 1

    assert list(RegistrationLink.objects.values_list("token_sha256", flat=True)) == [hashlib.sha256(live.encode()).hexdigest()]
