"""The tool's signing keys: the active one, made the first time it is needed, and rotation.

Below both the LTI services and the PyLTI1p3 wiring (``lti.tool``), which signs with the active key.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.db import IntegrityError, transaction
from django.utils import timezone
from jwcrypto.jwk import JWK

from labs.services.audit import audit_record
from lti.models import ToolKey


def active_key() -> ToolKey:
    """The key that signs; one is made the first time it is needed."""
    key = ToolKey.objects.filter(retired_at__isnull=True).first()
    if key is None:
        try:
            key = key_rotate()
        except IntegrityError:  # another process made the first key at the same moment
            key = ToolKey.objects.get(retired_at__isnull=True)
    return key


def key_rotate(*, by=None) -> ToolKey:
    """Make a new active RSA key (2048 bits); the previous one is retired but stays in the JWKS
    for ``LTI_KEY_GRACE_DAYS``, so platforms that cached it still verify what it signed."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_pem = (
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    )
    kid = JWK.from_pem(public_pem.encode()).thumbprint()
    with transaction.atomic():
        retired = ToolKey.objects.filter(retired_at__isnull=True).update(retired_at=timezone.now())
        key = ToolKey.objects.create(kid=kid, private_key_pem=private_pem, public_key_pem=public_pem)
        audit_record(by=by, action="lti.key.rotate", target=f"key {kid}", after={"retired": retired})
    return key
