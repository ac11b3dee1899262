"""The tool's keys: the JWKS endpoint, rotation with a grace period, the private key kept private."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import jwt
import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from jwt.algorithms import RSAAlgorithm

from lti.keys import key_rotate
from lti.models import ToolKey

pytestmark = pytest.mark.django_db


def jwks(client: Client) -> dict[str, dict]:
    return {key["kid"]: key for key in client.get("/lti/jwks/").json()["keys"]}


def test_rotation_makes_a_new_active_key_and_keeps_the_old_one_published(client):
    first = key_rotate()
    out = StringIO()

    call_command("lti_rotate_key", stdout=out)

    second = ToolKey.objects.get(retired_at__isnull=True)
    assert second.kid != first.kid
    assert f"kid={second.kid}" in out.getvalue()
    assert "PRIVATE" not in out.getvalue()
    assert set(jwks(client)) == {first.kid, second.kid}


def test_a_key_retired_longer_than_the_grace_period_leaves_the_jwks(client, settings):
    settings.LTI_KEY_GRACE_DAYS = 7
    old = key_rotate()
    current = key_rotate()
    ToolKey.objects.filter(pk=old.pk).update(retired_at=timezone.now() - timedelta(days=8))

    assert set(jwks(client)) == {current.kid}


def test_the_published_key_verifies_what_the_active_private_key_signs(client):
    key = key_rotate()
    token = jwt.encode({"hello": "platform"}, key.private_key_pem, algorithm="RS256", headers={"kid": key.kid})

    public = RSAAlgorithm.from_jwk(jwks(client)[key.kid])

    assert jwt.decode(token, public, algorithms=["RS256"]) == {"hello": "platform"}


def test_the_key_never_shows_its_private_part():
    key = key_rotate()

    assert "PRIVATE" not in str(key) and "PRIVATE" not in repr(key)
