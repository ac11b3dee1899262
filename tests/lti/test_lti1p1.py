"""The LTI 1.1 → 1.3 migration claim (lti1p1) through the ASGI application, as Daphne serves it:
a launch carrying the LTI 1.1 user id of an account the platform knew under 1.1 links to that
account; a forged ``oauth_consumer_key_sign`` and another institution's account are refused."""

from __future__ import annotations

import pytest
import requests
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from labs.models import AuditEvent, Course, Enrollment
from lti import lti1p1
from lti.models import Context, Identity, Lti11User
from tests.asgi_client import BASE_URL, AsgiClient
from tests.factories import InstitutionFactory, UserFactory, affiliate
from tests.lti.conftest import hidden_inputs
from tests.lti.platform import CLAIM, Platform

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def platform():
    """The platform alone: a launch needs only its keyset (the tool's JWKS is not asked for)."""
    lms = Platform().start()
    yield lms
    lms.stop()


@pytest.fixture
def legacy_student(registration, platform):
    """An account made by a course roster before the LMS moved to LTI 1.3, known to the platform
    under LTI 1.1 as user id "u-1p1-42"."""
    student = UserFactory(username="ada", first_name="Ada", last_name="Lovelace")
    affiliate([student], registration.institution)
    consumer = lti1p1.consumer_save(
        registration=registration, consumer_key=platform.lti11_consumer_key, shared_secret=platform.lti11_secret
    )
    assert lti1p1.users_import(consumer=consumer, rows=[("u-1p1-42", "ada")]) == []
    return student


def launch(client: AsgiClient, platform: Platform, **spec):
    """The LMS's login, the platform's authentication and the launch, the tool's side through ASGI."""
    platform.next_launch = spec
    check = client.get("/lti/login/", params=platform.login_params(target_link_uri=BASE_URL + "/lti/launch/"))
    assert check.status_code == 200, check.text
    redirect = client.get("/lti/login/", params=hidden_inputs(check.text))
    assert redirect.status_code == 302, redirect.text
    auth = requests.get(redirect.headers["Location"], timeout=10).json()
    return client.request("POST", "/lti/launch/", data={"id_token": auth["id_token"], "state": auth["state"]})


def _counts():
    return (get_user_model().objects.count(), Identity.objects.count(), Enrollment.objects.count(), Course.objects.count())


def test_a_launch_with_the_lti11_user_id_links_to_the_account_the_platform_knew(registration, platform, legacy_student):
    users_before = get_user_model().objects.count()
    client = AsgiClient(language="en")

    response = launch(client, platform, sub="new-1p3-sub", lti1p1_user_id="u-1p1-42")

    assert response.status_code == 302 and response.headers["Location"] == "/", response.text
    assert Identity.objects.get(issuer=registration.issuer, subject="new-1p3-sub").user == legacy_student
    assert get_user_model().objects.count() == users_before  # no second account
    course = Context.objects.get(registration=registration).course
    assert Enrollment.objects.get(course=course).user == legacy_student
    assert "Ada Lovelace" in client.get("/").text  # signed in as the existing account
    assert AuditEvent.objects.filter(action="lti.lti11.link").count() == 1


def test_the_next_launch_finds_the_account_by_its_lti13_identity(registration, platform, legacy_student):
    launch(AsgiClient(), platform, sub="new-1p3-sub", lti1p1_user_id="u-1p1-42")

    response = launch(AsgiClient(), platform, sub="new-1p3-sub")

    assert response.status_code == 302
    assert Identity.objects.get(subject="new-1p3-sub").user == legacy_student


def test_a_forged_consumer_key_signature_is_refused_and_links_nothing(registration, platform, legacy_student):
    platform.lti11_signing_secret = "not-the-secret"
    before = _counts()
    client = AsgiClient(language="en")

    response = launch(client, platform, sub="new-1p3-sub", lti1p1_user_id="u-1p1-42")

    assert response.status_code == 400
    assert "LTI 1.1 account link whose signature is wrong" in response.text
    assert _counts() == before
    assert client.get("/").status_code == 302  # not signed in


def test_a_claim_signed_over_other_launch_values_is_refused(registration, platform, legacy_student):
    """The signature covers the nonce: a signature copied from another launch does not verify."""
    other_launch = {CLAIM + "deployment_id": platform.deployment_id, "iss": platform.issuer, "aud": platform.client_id}
    copied = platform.lti11_sign({**other_launch, "exp": 1, "nonce": "another-launch"})
    claim = {"user_id": "u-1p1-42", "oauth_consumer_key": platform.lti11_consumer_key, "oauth_consumer_key_sign": copied}
    before = _counts()

    response = launch(AsgiClient(), platform, sub="new-1p3-sub", **{CLAIM + "lti1p1": claim})

    assert response.status_code == 400 and "signature is wrong" in response.text
    assert _counts() == before


def test_an_lti11_user_id_linked_to_another_institutions_account_is_refused(registration, platform, legacy_student):
    """Linked when the account was this institution's only; since then another institution has it
    too (or an import bypassed the check): the launch does not sign in as it."""
    affiliate([legacy_student], InstitutionFactory(slug="other-uni", name="Other U"))
    before = _counts()
    client = AsgiClient(language="en")

    response = launch(client, platform, sub="new-1p3-sub", lti1p1_user_id="u-1p1-42")

    assert response.status_code == 400
    assert "belongs to another institution" in response.text
    assert _counts() == before
    assert client.get("/").status_code == 302


def test_a_claim_for_a_consumer_key_the_registration_does_not_have_is_ignored(registration, platform, legacy_student):
    platform.lti11_consumer_key = "someone-elses-key"
    ignored = launch(AsgiClient(), platform, sub="other-sub", lti1p1_user_id="u-1p1-42")
    platform.lti11_consumer_key = "legacy-key"

    honoured = launch(AsgiClient(), platform, sub="new-1p3-sub", lti1p1_user_id="u-1p1-42")

    assert ignored.status_code == honoured.status_code == 302
    assert Identity.objects.get(subject="other-sub").user != legacy_student  # a new account, as before the claim
    assert Identity.objects.get(subject="new-1p3-sub").user == legacy_student


def test_the_command_sets_the_secret_and_imports_the_accounts_of_the_institution_only(registration, tmp_path):
    ada, staff, other = UserFactory(username="ada"), UserFactory(username="root", is_staff=True), UserFactory(username="bob")
    affiliate([ada, staff], registration.institution)
    affiliate([other], InstitutionFactory(slug="other-uni"))
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    call_command("lti_lti11", registration=registration.pk, consumer_key="key-1", secret_file=secret)
    assert registration.lti11_consumer.shared_secret == "s3cret"
    bad = tmp_path / "bad.csv"
    bad.write_text("lti11_user_id,username\nu1,ada\nu2,bob\nu3,root\nu4,nobody\n")

    with pytest.raises(CommandError) as refused:
        call_command("lti_lti11", registration=registration.pk, users=bad)

    assert "line 2: 'bob' is not an account of this institution only" in str(refused.value)
    assert "line 3: 'root'" in str(refused.value) and "line 4: no account 'nobody'" in str(refused.value)
    assert not Lti11User.objects.exists()  # all or nothing
    good = tmp_path / "good.csv"
    good.write_text("u1,ada\n")
    call_command("lti_lti11", registration=registration.pk, users=good)
    assert Lti11User.objects.get(lti11_user_id="u1").user == ada
