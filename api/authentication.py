"""Who calls the API: an institution's LMS, with an API token (``Authorization: Bearer npl_...``)
or an OAuth 2.0 access token it got with the client-credentials grant (``api.oauth``).

Either way the request's user is an ``ApiClient`` (not a Django user): it acts inside one
institution with a set of scopes, and the audit log names the token or the OAuth client.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.db import connection
from django.utils import timezone
from django.utils.translation import gettext as _
from oauth2_provider.contrib.rest_framework import OAuth2Authentication
from rest_framework import authentication, exceptions

from api.models import ApiToken, OAuthClient
from api.tokens import TOKEN_PREFIX, token_digest, token_prefix
from labs.models import Institution
from labs.selectors.rows import Conversion, column, conversion, converted, table

# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class ApiClient:
    """The caller. Quacks enough like a user for ``audit_record`` (``pk`` None, ``get_username``)."""

    institution: object
    scopes: frozenset[str]
    actor_name: str
    throttle_key: str  # one rate limit per API token or OAuth client
    pk = None
    is_authenticated = True
    is_anonymous = False
    is_superuser = False

    def get_username(self) -> str:
        return self.actor_name

    def __str__(self) -> str:
        return self.actor_name


def _bearer(request) -> str | None:
    header = authentication.get_authorization_header(request).split()
    if not header or header[0].lower() != b"bearer":
        return None
    if len(header) != 2:
        raise exceptions.AuthenticationFailed(_("The Authorization header is 'Bearer <token>', with no spaces in the token."))
    try:
        return header[1].decode("ascii")
    except UnicodeDecodeError:
        raise exceptions.AuthenticationFailed(_("Unknown, revoked or expired token.")) from None


class InstitutionTokenAuthentication(authentication.BaseAuthentication):
    """API tokens (``npl_...``); other bearer tokens are left to the OAuth authentication."""

    def authenticate(self, request):
        presented = _bearer(request)
        if presented is None or not presented.startswith(TOKEN_PREFIX):
            return None
        digest = token_digest(presented)
        token = token_read(token_prefix(presented), digest)
        # The lookup is by digest already; compare again in constant time so the answer's timing
        # never depends on how much of a guess was right.
        if token is None or not hmac.compare_digest(token.secret_sha256, digest) or not token.is_usable():
            raise exceptions.AuthenticationFailed(_("Unknown, revoked or expired token."))
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        client = ApiClient(token.institution, frozenset(token.scopes), token.actor_name, f"token:{token.pk}")
        return client, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


def token_read(prefix: str, digest: str) -> ApiToken | None:
    """``ApiToken.objects.select_related("institution").filter(prefix=..., secret_sha256=...).first()``
    with one written-out statement (``_token_sql``; docs/framework-overrides.md, "The written-out
    reads"): every API request reads its token, and composing that query (a join, and ``first()``'s
    ordering) was most of a small API request's CPU (a page of one session: 3.9 → 1.8 ms written
    out, docs/performance.md). The digest is unique: one row at most."""
    sql, token_names, institution_names, plan = _token_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, [prefix, digest])
        rows = cursor.fetchall()
    if not rows:
        return None
    (values,) = converted(rows, plan)
    token = ApiToken.from_db(connection.alias, token_names, values[: len(token_names)])
    institution = Institution.from_db(connection.alias, institution_names, values[len(token_names) :])
    ApiToken._meta.get_field("institution").set_cached_value(token, institution)
    return token


@cache
def _token_sql() -> tuple[str, list[str], list[str], Conversion]:
    """The token by prefix and digest with its institution, every column of both; their attribute
    names; the conversion of the values. Parameters: the prefix, the digest."""
    tokens, institutions = ApiToken._meta.concrete_fields, Institution._meta.concrete_fields
    t = lambda name: column(ApiToken, name, "t")  # noqa: E731
    i = lambda name: column(Institution, name, "i")  # noqa: E731
    columns = ", ".join([*(t(f.name) for f in tokens), *(i(f.name) for f in institutions)])
    sql = (
        f"SELECT {columns} FROM {table(ApiToken, 't')} JOIN {table(Institution, 'i')}"
        f" ON {i(Institution._meta.pk.name)} = {t('institution')} WHERE {t('prefix')} = %s AND {t('secret_sha256')} = %s"
    )
    return sql, [f.attname for f in tokens], [f.attname for f in institutions], conversion([*tokens, *institutions])


class InstitutionOAuth2Authentication(OAuth2Authentication):
    """OAuth 2.0 access tokens of an institution's ``OAuthClient``; the scopes are the access token's."""

    def authenticate(self, request):
        presented = _bearer(request)
        if presented is None or presented.startswith(TOKEN_PREFIX):
            return None
        found = super().authenticate(request)
        if found is None:
            raise exceptions.AuthenticationFailed(_("Unknown, revoked or expired token."))
        _user, access_token = found
        client = OAuthClient.objects.select_related("institution").filter(application_id=access_token.application_id).first()
        if client is None:
            raise exceptions.AuthenticationFailed(_("Unknown, revoked or expired token."))
        scopes = frozenset(access_token.scope.split()) & frozenset(client.scopes)
        return ApiClient(client.institution, scopes, client.actor_name, f"oauth:{client.pk}"), access_token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'
