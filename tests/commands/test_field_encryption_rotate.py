"""Rotating the encryption key: encrypted with key A; with [B, A] configured everything still reads
and ``field_encryption_rotate`` encrypts it all again with B; then B alone reads it, A alone no
longer does. A value no configured key reads stops the command, changing nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection

from labs.encryption import UndecryptableValue
from lti.keys import key_rotate
from lti.models import ToolKey
from webhooks.models import Subscription
from webhooks.services import subscription_create


def stored() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM webhooks_subscription")
        (secret,) = cursor.fetchone()
        cursor.execute("SELECT private_key_pem FROM lti_toolkey")
        (pem,) = cursor.fetchone()
    return secret, pem


def read() -> tuple[str, str]:
    return Subscription.objects.get().secret, ToolKey.objects.get().private_key_pem


def test_a_new_key_put_first_then_the_rotation_then_the_old_key_dropped(world, settings):
    a, b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEYS = [a]
    _subscription, secret = subscription_create(
        institution=world["course"].institution, url="https://lms.example.edu/h", event_types=["session.queued"]
    )
    pem = key_rotate().private_key_pem
    assert [Fernet(a).decrypt(v.encode()).decode() for v in stored()] == [secret, pem]

    settings.FIELD_ENCRYPTION_KEYS = [b, a]
    assert read() == (secret, pem)  # the old key still reads what it encrypted
    out = StringIO()
    call_command("field_encryption_rotate", stdout=out)

    assert "webhooks.Subscription.secret: 1 re-encrypted" in out.getvalue()
    assert "lti.ToolKey.private_key_pem: 1 re-encrypted" in out.getvalue()
    assert secret not in out.getvalue() and "PRIVATE KEY" not in out.getvalue()
    assert [Fernet(b).decrypt(v.encode()).decode() for v in stored()] == [secret, pem]
    settings.FIELD_ENCRYPTION_KEYS = [b]
    assert read() == (secret, pem)
    settings.FIELD_ENCRYPTION_KEYS = [a]
    with pytest.raises(UndecryptableValue):
        read()


def test_a_value_no_configured_key_reads_stops_the_rotation_and_changes_nothing(world, settings):
    a, b = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.FIELD_ENCRYPTION_KEYS = [b]
    key_rotate()  # the LTI key under B, rotated first (its app comes first)
    settings.FIELD_ENCRYPTION_KEYS = [a]
    subscription_create(institution=world["course"].institution, url="https://lms.example.edu/h", event_types=[])
    before = stored()

    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode(), b]  # A dropped before the rotation
    with pytest.raises(CommandError, match="cannot be decrypted with any key in FIELD_ENCRYPTION_KEY.*Nothing was changed"):
        call_command("field_encryption_rotate", stdout=StringIO())

    assert stored() == before
