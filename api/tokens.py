"""Making and checking token secrets. A secret is 32 random bytes (URL-safe text); only its
SHA-256 is stored, which is enough for a secret of that entropy (no salt or slow hash needed)."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "npl_"
PREFIX_LENGTH = 12  # what is kept in clear: "npl_" and 8 characters of the secret


def token_new() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_prefix(token: str) -> str:
    return token[:PREFIX_LENGTH]
