"""The LTI tool's private keys and the webhook signing secrets are encrypted at rest: the database
column holds ciphertext, the model reads the plaintext, and a key that cannot read a value, or no
key at all, is a clear error rather than garbage."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from labs.encryption import UndecryptableValue
from lti.keys import key_rotate
from lti.models import ToolKey
from webhooks.models import Subscription
from webhooks.services import subscription_create


def stored(table: str, column: str) -> str:
    """The column's value as the database holds it (one row)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table}")
        (value,) = cursor.fetchone()
    return value


@pytest.fixture
def subscription(world):
    subscription, secret = subscription_create(
        institution=world["course"].institution, url="https://lms.example.edu/h", event_types=["session.queued"]
    )
    return subscription, secret


def test_a_webhook_secret_is_stored_as_ciphertext_and_read_as_the_secret(subscription, settings):
    _subscription, secret = subscription

    column = stored("webhooks_subscription", "secret")

    assert secret.startswith("whsec_") and secret not in column and "whsec_" not in column
    assert Fernet(settings.FIELD_ENCRYPTION_KEYS[0]).decrypt(column.encode()).decode() == secret
    assert Subscription.objects.get().secret == secret
    assert Subscription.objects.values_list("secret", flat=True).get() == secret


def test_a_rotated_webhook_secret_is_stored_as_ciphertext_too(subscription):
    from webhooks.services import subscription_rotate_secret

    new = subscription_rotate_secret(subscription=subscription[0])

    assert new not in stored("webhooks_subscription", "secret")
    assert Subscription.objects.get().secret == new


def test_an_lti_private_key_is_stored_as_ciphertext_and_read_as_the_pem(db, settings):
    key = key_rotate()

    column = stored("lti_toolkey", "private_key_pem")

    assert "PRIVATE KEY" not in column
    assert Fernet(settings.FIELD_ENCRYPTION_KEYS[0]).decrypt(column.encode()).decode() == key.private_key_pem
    assert ToolKey.objects.get().private_key_pem.startswith("-----BEGIN PRIVATE KEY-----")
    assert ToolKey.objects.get().public_key_pem.startswith("-----BEGIN PUBLIC KEY-----")  # public: in clear


def test_a_value_under_a_key_not_configured_is_a_clear_error_not_garbage(subscription, settings):
    column = stored("webhooks_subscription", "secret")
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]

    with pytest.raises(UndecryptableValue) as refused:
        Subscription.objects.get()

    message = str(refused.value)
    assert "webhooks.Subscription.secret" in message and "FIELD_ENCRYPTION_KEY" in message
    assert column not in message and settings.FIELD_ENCRYPTION_KEYS[0] not in message


def test_an_altered_value_is_refused_as_well(subscription):
    column = stored("webhooks_subscription", "secret")
    altered = column[:-8] + ("A" if column[-8] != "A" else "B") + column[-7:]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE webhooks_subscription SET secret = %s", [altered])

    with pytest.raises(UndecryptableValue, match="webhooks.Subscription.secret"):
        Subscription.objects.get()


def test_without_a_key_nothing_is_stored_and_the_error_says_what_to_set(world, settings):
    settings.FIELD_ENCRYPTION_KEYS = []

    with pytest.raises(ImproperlyConfigured, match="Set FIELD_ENCRYPTION_KEY or FIELD_ENCRYPTION_KEY_FILE"):
        subscription_create(institution=world["course"].institution, url="https://lms.example.edu/h", event_types=[])

    assert not Subscription.objects.exists()
