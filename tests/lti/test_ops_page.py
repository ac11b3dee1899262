"""The operator console's LMS page: operators register their own institution's LMSs, in both languages, with CSRF."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from labs.models import AuditEvent, Institution, InstitutionRole
from lti.models import Registration
from lti.services import registration_save
from tests.asgi_client import AsgiClient
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

FIELDS = {
    "name": "Moodle",
    "issuer": "https://moodle.uni.example",
    "client_id": "abc123",
    "auth_login_url": "https://moodle.uni.example/mod/lti/auth.php",
    "auth_token_url": "https://moodle.uni.example/mod/lti/token.php",
    "auth_audience": "",
    "keyset_url": "https://moodle.uni.example/mod/lti/certs.php",
}


@pytest.fixture
def tenants():
    home = Institution.objects.create(name="Home University", slug="home")
    away = Institution.objects.create(name="Away University", slug="away")
    operator = UserFactory(username="home-op")
    InstitutionRole.objects.create(user=operator, institution=home, role="operator")
    their_fields = {**FIELDS, "issuer": "https://lms.away.example", "client_id": "away"}
    theirs = registration_save(by=None, institution=away, fields=their_fields, deployment_ids=["9"])
    return {"home": home, "away": away, "operator": operator, "theirs": theirs}


def signed_in(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def test_an_operator_registers_an_lms_for_their_institution(tenants):
    client = signed_in(tenants["operator"])
    page = client.get("/ops/lti/")
    assert page.status_code == 200
    assert "http://testserver/lti/jwks/" in page.content.decode()
    assert "away" not in page.content.decode()  # another institution's registration

    response = client.post("/ops/lti/", {**FIELDS, "institution": tenants["home"].pk, "deployment_ids": "1\n2\n"})

    assert response.status_code == 302
    registration = Registration.objects.get(client_id="abc123")
    assert registration.institution == tenants["home"]
    assert sorted(registration.deployments.values_list("deployment_id", flat=True)) == ["1", "2"]
    assert AuditEvent.objects.filter(action="lti.registration.create", actor=tenants["operator"]).exists()


@pytest.mark.django_db(transaction=True)
def test_an_operator_registers_an_lms_through_the_asgi_application_as_daphne_serves_it(tenants):
    """Under ASGI ``request.scope`` is the connection's ASGI scope, which the request's scheme and
    host are read from (the tool URLs on this page): the operator console must leave it alone."""
    client = AsgiClient(user=tenants["operator"])
    page = client.get("/ops/lti/")
    assert page.status_code == 200
    assert "http://testserver/lti/jwks/" in page.text

    response = client.post("/ops/lti/", {**FIELDS, "institution": tenants["home"].pk, "deployment_ids": "1\n2\n"})

    assert response.status_code == 302
    assert Registration.objects.get(client_id="abc123").institution == tenants["home"]
    edit = client.get(f"/ops/lti/{Registration.objects.get(client_id='abc123').pk}/")
    assert edit.status_code == 200 and "abc123" in edit.text


def test_an_operator_cannot_register_for_or_edit_another_institution(tenants):
    client = signed_in(tenants["operator"])

    response = client.post("/ops/lti/", {**FIELDS, "institution": tenants["away"].pk, "deployment_ids": "1"})

    assert response.status_code == 200  # the form refuses the choice
    assert not Registration.objects.filter(client_id="abc123").exists()
    assert client.get(f"/ops/lti/{tenants['theirs'].pk}/").status_code == 404
    assert client.post(f"/ops/lti/{tenants['theirs'].pk}/delete/").status_code == 404
    assert Registration.objects.filter(pk=tenants["theirs"].pk).exists()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_lms_another_institution_registered_cannot_be_registered_again(tenants, language):
    """Its users' accounts are found by (issuer, subject): a second registration of the issuer with
    keys of its own could sign launches as any of them."""
    client = signed_in(tenants["operator"], headers={"accept-language": language})
    fields = {**FIELDS, "issuer": tenants["theirs"].issuer, "client_id": "mine", "institution": tenants["home"].pk}

    response = client.post("/ops/lti/", {**fields, "deployment_ids": "1"})

    assert response.status_code == 200
    expected = {"en": "This issuer is registered for another institution", "zh-hans": "此签发者已由另一机构注册"}[language]
    assert expected in response.content.decode()
    assert not Registration.objects.filter(client_id="mine").exists()
    # The same within one institution is its own business (two client ids of one LMS).
    ours = registration_save(by=None, institution=tenants["home"], fields={**FIELDS, "client_id": "one"}, deployment_ids=["1"])
    assert registration_save(by=None, institution=tenants["home"], fields={**FIELDS, "client_id": "two"}, deployment_ids=["1"])
    with pytest.raises(ValidationError) as refused:
        registration_save(by=None, institution=tenants["away"], fields={**FIELDS, "client_id": "three"}, deployment_ids=["1"])
    assert "issuer" in refused.value.message_dict and ours.institution == tenants["home"]


# A platform's keyset and token URLs are called by the portal and its login URL is where browsers
# go: each must be https and not a local or private address, as a webhook URL must.
UNSAFE_URLS = {
    "keyset_url": "http://moodle.uni.example/mod/lti/certs.php",
    "auth_token_url": "https://10.0.0.5/mod/lti/token.php",
    "auth_login_url": "https://localhost/mod/lti/auth.php",
}
REFUSALS = {
    "en": ["The URL must use https", "The URL points to a local or private address"],
    "zh-hans": ["URL 必须使用 https", "该 URL 指向本地或私有地址"],
}


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_platform_urls_must_be_https_and_public_unless_the_settings_allow_it(tenants, settings, language):
    settings.OUTBOUND_ALLOW_HTTP = settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    client = signed_in(tenants["operator"], headers={"accept-language": language})
    body = {**FIELDS, **UNSAFE_URLS, "institution": tenants["home"].pk, "deployment_ids": "1"}

    response = client.post("/ops/lti/", body)

    assert response.status_code == 200
    errors = response.context["form"].errors
    assert sorted(errors) == sorted(UNSAFE_URLS)
    page = response.content.decode()
    assert all(refusal in page for refusal in REFUSALS[language])
    assert not Registration.objects.filter(client_id="abc123").exists()
    edited = client.post(f"/ops/lti/{tenants['theirs'].pk}/", body)
    assert edited.status_code in (200, 404)  # another institution's: not found; refused either way
    mine = registration_save(by=None, institution=tenants["home"], fields={**FIELDS, "client_id": "mine"}, deployment_ids=["1"])
    refused = client.post(f"/ops/lti/{mine.pk}/", {**body, "client_id": "mine"})
    assert refused.status_code == 200 and sorted(refused.context["form"].errors) == sorted(UNSAFE_URLS)
    mine.refresh_from_db()
    assert mine.keyset_url == FIELDS["keyset_url"] and mine.auth_token_url == FIELDS["auth_token_url"]

    settings.OUTBOUND_ALLOW_HTTP = settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = True
    assert client.post("/ops/lti/", body).status_code == 302
    assert Registration.objects.filter(client_id="abc123").exists()


def test_a_registration_saved_by_the_service_or_the_admin_follows_the_same_url_rule(tenants, settings):
    settings.OUTBOUND_ALLOW_HTTP = settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    fields = {**FIELDS, **UNSAFE_URLS, "keyset_url": "https://[::1]/certs", "client_id": "svc"}

    with pytest.raises(ValidationError) as refused:
        registration_save(by=None, institution=tenants["home"], fields=fields, deployment_ids=["1"])
    assert sorted(refused.value.message_dict) == sorted(UNSAFE_URLS)
    with pytest.raises(ValidationError) as admin:
        Registration(institution=tenants["home"], **fields).full_clean()  # the admin's form validates the model
    assert sorted(admin.value.message_dict) == sorted(UNSAFE_URLS)
    assert not Registration.objects.filter(client_id="svc").exists()
    assert not AuditEvent.objects.filter(action="lti.registration.create", target__contains="svc").exists()


def test_the_page_needs_an_operator_and_a_csrf_token(tenants):
    assert signed_in(UserFactory(username="nobody")).get("/ops/lti/").status_code == 404
    strict = signed_in(tenants["operator"], enforce_csrf_checks=True)

    response = strict.post("/ops/lti/", {**FIELDS, "institution": tenants["home"].pk, "deployment_ids": "1"})

    assert response.status_code == 403
    assert not Registration.objects.filter(client_id="abc123").exists()


def test_the_page_speaks_chinese(tenants):
    client = signed_in(tenants["operator"], headers={"accept-language": "zh-hans"})

    page = client.get("/ops/lti/").content.decode()

    assert "注册 LMS" in page and "公钥集（JWKS）URL" in page


def test_the_list_costs_the_same_queries_for_one_or_many_registrations(tenants, django_assert_max_num_queries):
    client = signed_in(UserFactory(username="root", is_superuser=True))
    with CaptureQueriesContext(connection) as one:
        assert client.get("/ops/lti/").status_code == 200
    for n in range(5):
        fields = {**FIELDS, "client_id": f"c{n}"}
        registration_save(by=None, institution=tenants["home"], fields=fields, deployment_ids=["1", "2"])

    with django_assert_max_num_queries(len(one)):
        assert client.get("/ops/lti/").status_code == 200
