"""manage.py lti_register: an operator's shell way to register an LMS."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from labs.models import AuditEvent, Institution
from lti.models import Registration

pytestmark = pytest.mark.django_db

ARGS = [
    "--name=Moodle",
    "--issuer=https://moodle.uni.example",
    "--client-id=abc",
    "--login-url=https://moodle.uni.example/mod/lti/auth.php",
    "--token-url=https://moodle.uni.example/mod/lti/token.php",
    "--keyset-url=https://moodle.uni.example/mod/lti/certs.php",
    "--deployment=1",
]


def test_it_registers_then_updates_an_lms():
    Institution.objects.create(name="Uni", slug="uni")

    call_command("lti_register", "--institution=uni", *ARGS, stdout=StringIO())
    call_command("lti_register", "--institution=uni", *ARGS, "--deployment=2", "--name=Moodle 4", stdout=StringIO())

    registration = Registration.objects.get()
    assert registration.name == "Moodle 4"
    assert sorted(registration.deployments.values_list("deployment_id", flat=True)) == ["1", "2"]
    assert AuditEvent.objects.filter(action="lti.registration.edit").exists()


def test_it_refuses_to_move_a_registration_to_another_institution():
    Institution.objects.create(name="Uni", slug="uni")
    Institution.objects.create(name="Other", slug="other")
    call_command("lti_register", "--institution=uni", *ARGS, stdout=StringIO())

    with pytest.raises(CommandError, match="another institution"):
        call_command("lti_register", "--institution=other", *ARGS, stdout=StringIO())
    with pytest.raises(CommandError, match="no institution"):
        call_command("lti_register", "--institution=nowhere", *ARGS, stdout=StringIO())


def test_it_refuses_an_issuer_another_institution_registered_with_its_own_client_id():
    Institution.objects.create(name="Uni", slug="uni")
    Institution.objects.create(name="Other", slug="other")
    call_command("lti_register", "--institution=uni", *ARGS, stdout=StringIO())
    other_client = [arg if not arg.startswith("--client-id=") else "--client-id=other-client" for arg in ARGS]
    assert other_client != ARGS

    with pytest.raises(CommandError, match="registered for another institution"):
        call_command("lti_register", "--institution=other", *other_client, stdout=StringIO())
    assert Registration.objects.count() == 1


def test_a_platform_url_the_portal_would_not_call_is_refused_naming_its_option(settings):
    settings.OUTBOUND_ALLOW_HTTP = settings.OUTBOUND_ALLOW_PRIVATE_ADDRESSES = False
    Institution.objects.create(name="Uni", slug="uni")
    args = [a for a in ARGS if not a.startswith(("--keyset-url", "--token-url"))]

    with pytest.raises(CommandError) as refused:
        call_command(
            "lti_register",
            "--institution=uni",
            *args,
            "--keyset-url=http://moodle.uni.example/certs.php",
            "--token-url=https://192.168.1.10/token.php",
            stdout=StringIO(),
        )

    assert "--keyset-url: The URL must use https" in str(refused.value)
    assert "--token-url: The URL points to a local or private address" in str(refused.value)
    assert not Registration.objects.exists() and not AuditEvent.objects.exists()
