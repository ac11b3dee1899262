"""``manage.py oauth_client create --institution uni --name canvas --scopes courses:read roster:write``
prints the new client's id and secret (the secret only this once: it is stored hashed);
``oauth_client list`` shows the clients and ``oauth_client revoke <client id>`` deletes one,
its access tokens with it."""

from __future__ import annotations

from django.core.management.base import CommandError

from api.management.credentials import CredentialCommand
from api.models import OAuthClient
from api.oauth import oauth_client_create, oauth_client_revoke


class Command(CredentialCommand):
    help = "Create, list or revoke institutions' OAuth 2.0 clients (docs/lms.md 'REST API')."
    create_help = "make a client and print its id and secret (the secret only this once)"
    list_help = "the clients (ids, never secrets)"
    revoke_help = "delete a client by its client id; its access tokens stop working"
    revoke_arg = "client_id"

    def _create(self, *, institution: str, name: str, scopes: list[str], **_options) -> None:
        found = self.institution(institution)
        if not name.strip():
            raise CommandError("--name must not be blank.")
        client, secret = oauth_client_create(institution=found, name=name, scopes=self.scopes(scopes))
        self.stdout.write(f"client_id: {client.application.client_id}\nclient_secret: {secret}")
        self.stderr.write("The secret is shown only now; it is stored hashed.")

    def _list(self, *, institution: str | None, **_options) -> None:
        clients = OAuthClient.objects.select_related("institution", "application").order_by("institution__slug", "created_at")
        if institution:
            clients = clients.filter(institution__slug=institution)
        for c in clients:
            self.stdout.write(f"{c.application.client_id}\t{c.institution.slug}\t{c.application.name}\t{' '.join(c.scopes)}")

    def _revoke(self, *, client_id: str, **_options) -> None:
        client = OAuthClient.objects.select_related("institution", "application").filter(application__client_id=client_id).first()
        if client is None:
            raise CommandError(f"No OAuth client has the id {client_id!r}.")
        oauth_client_revoke(client=client, reason="manage.py oauth_client revoke")
        self.stdout.write(f"Revoked {client.application.name} of {client.institution.slug}.")
