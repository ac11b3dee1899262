"""The LTI 1.1 → 1.3 migration claim (IMS "LTI 1.1 Migration Guide"): a platform that served the
tool over LTI 1.1 sends, in its LTI 1.3 launches, the user's 1.1 ``user_id`` and its 1.1
``oauth_consumer_key``, with ``oauth_consumer_key_sign`` proving it holds that key's shared secret.

The portal trusts the claim only when the registration has the 1.1 consumer key and secret
(``Lti11Consumer``) and the signature verifies; then the account the platform knew under 1.1
(``Lti11User``, imported by ``manage.py lti_lti11``) is the launch's account. A claim for another
consumer key, or on a registration with none, is ignored (the launch goes on as any other). A
signature that does not verify refuses the launch: the guide leaves the choice to the tool, and
going on would give the person a second, new account that then keeps their LTI 1.3 identity.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging

from django.contrib.auth import get_user_model
from django.db import transaction

from labs.services.audit import audit_record
from lti.models import Lti11Consumer, Lti11User, Registration

logger = logging.getLogger(__name__)

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/lti1p1"
DEPLOYMENT_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/deployment_id"


class ForgedSignature(Exception):
    """The launch's ``oauth_consumer_key_sign`` is not the registration's 1.1 secret's."""


def consumer_key_sign(*, consumer_key: str, claims: dict, shared_secret: str) -> str:
    """The ``oauth_consumer_key_sign`` of a launch: base64 of the HMAC-SHA256, keyed with the 1.1
    shared secret, of ``oauth_consumer_key & deployment_id & iss & client_id & exp & nonce``
    (the client id is ``aud``, or ``azp`` when ``aud`` names several)."""
    audience = claims.get("aud")
    if isinstance(audience, list):
        audience = claims.get("azp") if len(audience) != 1 else audience[0]
    parts = [consumer_key, claims.get(DEPLOYMENT_CLAIM), claims.get("iss"), audience, claims.get("exp"), claims.get("nonce")]
    message = "&".join("" if part is None else str(part) for part in parts)
    digest = hmac.new(shared_secret.encode(), message.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def legacy_account(*, registration: Registration, claims: dict):
    """The account linked to the launch's LTI 1.1 user id, or ``None`` (no claim, no user id, a
    consumer key this registration does not have, or no account linked to the user id).

    Raises ``ForgedSignature`` when the claim names the registration's consumer key with a
    signature its shared secret did not make."""
    claim = claims.get(CLAIM)
    if not isinstance(claim, dict) or not claim.get("user_id") or not claim.get("oauth_consumer_key"):
        return None
    consumer = Lti11Consumer.objects.filter(registration=registration).first()
    key = str(claim["oauth_consumer_key"])
    if consumer is None or not hmac.compare_digest(consumer.consumer_key.encode(), key.encode()):
        logger.info("LTI 1.1 migration claim ignored: registration %s has no consumer key %r", registration.pk, key)
        return None
    expected = consumer_key_sign(consumer_key=key, claims=claims, shared_secret=consumer.shared_secret)
    if not hmac.compare_digest(expected.encode(), str(claim.get("oauth_consumer_key_sign") or "").encode()):
        logger.warning("LTI launch refused: a forged oauth_consumer_key_sign for registration %s", registration.pk)
        raise ForgedSignature
    link = Lti11User.objects.select_related("user").filter(consumer=consumer, lti11_user_id=str(claim["user_id"])).first()
    return link.user if link is not None else None


def of_institution_only(user, institution_id: int) -> bool:
    """Whether ``user`` is an account of the institution and of no other, and no staff account:
    the only kind an LTI 1.1 user id may link an LMS identity to."""
    if user.is_staff or user.is_superuser:
        return False
    others = user.affiliations.exclude(institution_id=institution_id).exists()
    return not others and user.affiliations.filter(institution_id=institution_id).exists()


def consumer_save(*, registration: Registration, consumer_key: str, shared_secret: str) -> Lti11Consumer:
    """Set the LTI 1.1 consumer key and shared secret of ``registration`` (audited, the secret not)."""
    if not consumer_key.strip() or not shared_secret.strip():
        raise ValueError("the consumer key and the shared secret must not be empty")
    with transaction.atomic():
        consumer, _ = Lti11Consumer.objects.update_or_create(
            registration=registration, defaults={"consumer_key": consumer_key.strip(), "shared_secret": shared_secret.strip()}
        )
        audit_record(
            by=None,
            action="lti.lti11.consumer",
            target=f"LTI {registration.issuer} {registration.client_id}",
            institution=registration.institution,
            after={"consumer_key": consumer.consumer_key},
        )
    return consumer


def users_import(*, consumer: Lti11Consumer, rows: list[tuple[str, str]]) -> list[str]:
    """Link LTI 1.1 user ids to portal accounts: ``rows`` of (1.1 user id, username). All or nothing:
    returns the problems (one per bad row, with its line number) and writes nothing if there are any."""
    User = get_user_model()
    institution_id = consumer.registration.institution_id
    problems: list[str] = []
    wanted: list[tuple[str, object]] = []
    for number, (user_id, username) in enumerate(rows, start=1):
        user = User.objects.filter(username=username.strip()).first()
        if not user_id.strip():
            problems.append(f"line {number}: no user id")
        elif user is None:
            problems.append(f"line {number}: no account {username.strip()!r}")
        elif not of_institution_only(user, institution_id):
            problems.append(f"line {number}: {username.strip()!r} is not an account of this institution only")
        else:
            wanted.append((user_id.strip(), user))
    if problems:
        return problems
    with transaction.atomic():
        for user_id, user in wanted:
            Lti11User.objects.update_or_create(consumer=consumer, lti11_user_id=user_id, defaults={"user": user})
        audit_record(
            by=None,
            action="lti.lti11.import",
            target=f"LTI {consumer.registration.issuer} {consumer.consumer_key}",
            institution=consumer.registration.institution,
            after={"users": len(wanted)},
        )
    return []
