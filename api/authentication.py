"""``Authorization: Bearer <token>`` with an institution API token.

The request's user is an ``ApiClient`` (not a Django user): it acts inside its token's
institution only, and the audit log names the token.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from api.models import ApiToken
from api.tokens import token_digest, token_prefix

# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class ApiClient:
    """Who is calling: an institution's token. Quacks enough like a user for ``audit_record``."""

    token: ApiToken
    pk = None
    is_authenticated = True
    is_anonymous = False
    is_superuser = False

    @property
    def institution(self):
        return self.token.institution

    def get_username(self) -> str:
        return self.token.actor_name

    def __str__(self) -> str:
        return self.token.actor_name


class InstitutionTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("The Authorization header is 'Bearer <token>', with no spaces in the token.")
        try:
            presented = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Unknown, revoked or expired token.") from None
        digest = token_digest(presented)
        token = (
            ApiToken.objects.select_related("institution").filter(prefix=token_prefix(presented), secret_sha256=digest).first()
        )
        # The lookup is by digest already; compare again in constant time so the answer's timing
        # never depends on how much of a guess was right.
        if token is None or not hmac.compare_digest(token.secret_sha256, digest) or not token.is_usable():
            raise exceptions.AuthenticationFailed("Unknown, revoked or expired token.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return ApiClient(token), token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'
