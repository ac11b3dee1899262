"""``manage.py oauth_client create --institution uni --name canvas --scopes courses:read roster:write``
prints the new client's id and secret (the secret only this once: it is stored hashed);
``oauth_client list`` shows the clients and ``oauth_client revoke <client id>`` deletes one,
its access tokens with it."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from api.models import OAuthClient
from api.oauth import oauth_client_create, oauth_client_revoke
from api.scopes import SCOPES, unknown_scopes
from labs.models import Institution


class Command(BaseCommand):
    help = "Create, list or revoke institutions' OAuth 2.0 clients (docs/lms.md 'REST API')."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="make a client and print its id and secret (the secret only this once)")
        create.add_argument("--institution", required=True, help="the institution's slug")
        create.add_argument("--name", required=True)
        create.add_argument("--scopes", nargs="+", required=True, help=f"any of: {' '.join(SCOPES)}; 'all' for every one")
        listing = sub.add_parser("list", help="the clients (ids, never secrets)")
        listing.add_argument("--institution", default=None)
        revoke = sub.add_parser("revoke", help="delete a client by its client id; its access tokens stop working")
        revoke.add_argument("client_id")

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _create(self, *, institution: str, name: str, scopes: list[str], **_options) -> None:
        found = Institution.objects.filter(slug=institution).first()
        if found is None:
            raise CommandError(f"No institution has the slug {institution!r}.")
        if not name.strip():
            raise CommandError("--name must not be blank.")
        scopes = list(SCOPES) if scopes == ["all"] else [s for part in scopes for s in part.split(",") if s]
        if unknown := unknown_scopes(scopes):
            raise CommandError(f"Unknown scopes {', '.join(unknown)}; use any of: {' '.join(SCOPES)}.")
        client, secret = oauth_client_create(institution=found, name=name, scopes=scopes)
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
