"""Signing deliveries the Standard Webhooks way (https://www.standardwebhooks.com/), so a receiver
can check them with any of its libraries or the ten lines in docs/lms.md "Webhooks".

The secret is ``whsec_`` and base64 of 24 random bytes; the key is those bytes. Every delivery
carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``:
``v1,`` and base64 of HMAC-SHA256(key, ``"{id}.{timestamp}.{body}"``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import secrets

SECRET_PREFIX = "whsec_"


def secret_new() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value for ``body`` (the exact bytes sent)."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


def signed_headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, message_id, timestamp, body),
    }


def retry_delay_seconds(attempt: int, *, base: float, maximum: float, rng: random.Random | None = None) -> float:
    """How long to wait after failed attempt number ``attempt`` (1, 2, ...) before the next one.

    Exponential, four times longer each time (``base``, 4 ``base``, 16 ``base``, ...) up to
    ``maximum``, with "equal jitter": a random point in the upper half of that, so receivers
    that came back at once are not hit by every sender in the same second.
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, not {attempt}")
    delay = min(maximum, base * 4 ** min(attempt - 1, 30))
    return delay / 2 + (rng or random).uniform(0, delay / 2)
