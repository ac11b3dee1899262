"""The migrations that encrypt the secrets at rest encrypt the ones stored in clear before them, undo
to clear text, and stop naming the setting when there is no key to encrypt with."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from lti.models import ToolKey
from webhooks.models import Subscription

BEFORE = [("webhooks", "0001_initial"), ("lti", "0002_score_outbox")]
AFTER = [("webhooks", "0002_encrypt_secrets"), ("lti", "0003_encrypt_secrets")]
SECRET = "whsec_c2VjcmV0LXNpZ25pbmcta2V5LTAxMjM0NTY3"
PEM = "-----BEGIN PRIVATE KEY-----\nMIIE...\n-----END PRIVATE KEY-----\n"


def migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


def stored() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM webhooks_subscription")
        (secret,) = cursor.fetchone()
        cursor.execute("SELECT private_key_pem FROM lti_toolkey")
        (pem,) = cursor.fetchone()
    return secret, pem


@pytest.fixture
def secrets_in_clear(transactional_db):
    """A webhook subscription and an LTI key stored before the encryption; the latest schema after."""
    executor = migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    institution = old.get_model("labs", "Institution").objects.create(name="Old University", slug="old")
    old.get_model("webhooks", "Subscription").objects.create(
        institution=institution, url="https://lms.example.edu/h", event_types=[], secret=SECRET
    )
    old.get_model("lti", "ToolKey").objects.create(kid="old-key", private_key_pem=PEM, public_key_pem="public")
    assert stored() == (SECRET, PEM)
    yield
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_secrets_stored_in_clear_are_encrypted_and_read_back_in_clear(secrets_in_clear, settings):
    migrate(AFTER)

    secret, pem = stored()
    key = Fernet(settings.FIELD_ENCRYPTION_KEYS[0])
    assert SECRET not in secret and "PRIVATE KEY" not in pem
    assert (key.decrypt(secret.encode()).decode(), key.decrypt(pem.encode()).decode()) == (SECRET, PEM)
    assert (Subscription.objects.get().secret, ToolKey.objects.get().private_key_pem) == (SECRET, PEM)

    migrate(BEFORE)  # undone: in clear again
    assert stored() == (SECRET, PEM)


def test_without_a_key_the_migration_stops_naming_the_setting_and_leaves_them_in_clear(secrets_in_clear, settings):
    settings.FIELD_ENCRYPTION_KEYS = []

    with pytest.raises(ImproperlyConfigured, match="FIELD_ENCRYPTION_KEY"):
        migrate(AFTER)

    assert stored() == (SECRET, PEM)
