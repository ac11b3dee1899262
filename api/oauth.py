"""OAuth 2.0 client credentials for LMS back ends (django-oauth-toolkit).

An institution's operator makes an ``OAuthClient`` (a DOT ``Application`` with the
client-credentials grant and a set of the API's scopes). The LMS posts its client id and secret
to ``/api/v1/oauth/token/`` (``grant_type=client_credentials``, optionally ``scope=...``) and gets
an access token that lives ``API_OAUTH_TOKEN_SECONDS``; it may ask only for its client's scopes.
"""

from __future__ import annotations

from django.db import transaction
from oauth2_provider.generators import generate_client_secret
from oauth2_provider.models import get_application_model
from oauth2_provider.scopes import BaseScopes

from api.models import OAuthClient
from api.scopes import SCOPES, unknown_scopes
from labs.models import Institution
from labs.services.audit import audit_record


class InstitutionScopes(BaseScopes):
    """The API's scopes; an application may get only those its ``OAuthClient`` lists (all by default)."""

    def get_all_scopes(self) -> dict[str, str]:
        return {name: str(label) for name, label in SCOPES.items()}

    def _of(self, application) -> list[str]:
        client = OAuthClient.objects.filter(application=application).first() if application is not None else None
        return list(client.scopes) if client is not None else []

    def get_available_scopes(self, application=None, request=None, *args, **kwargs) -> list[str]:
        return self._of(application)

    def get_default_scopes(self, application=None, request=None, *args, **kwargs) -> list[str]:
        return self._of(application)


def oauth_client_create(*, institution: Institution, name: str, scopes: list[str], by=None) -> tuple[OAuthClient, str]:
    """A new client of ``institution``; returns it and its secret (stored hashed: shown only now)."""
    if unknown := unknown_scopes(scopes):
        raise ValueError(f"unknown scopes {unknown}")
    Application = get_application_model()
    secret = generate_client_secret()
    with transaction.atomic():
        application = Application.objects.create(
            name=name.strip(),
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_CLIENT_CREDENTIALS,
            client_secret=secret,
            hash_client_secret=True,
        )
        client = OAuthClient.objects.create(
            application=application,
            institution=institution,
            scopes=sorted(set(scopes)),
            created_by=by if getattr(by, "pk", None) else None,
        )
        audit_record(
            by=by,
            action="oauth_client.create",
            target=f"OAuth client {application.name} ({application.client_id})",
            institution=institution,
            after={"scopes": client.scopes},
        )
    return client, secret


def oauth_client_revoke(*, client: OAuthClient, by=None, reason: str = "") -> None:
    """Delete the client's application: its access tokens stop working at once."""
    with transaction.atomic():
        audit_record(
            by=by,
            action="oauth_client.revoke",
            target=f"OAuth client {client.application.name} ({client.application.client_id})",
            institution=client.institution,
            after={"reason": reason},
        )
        client.application.delete()
