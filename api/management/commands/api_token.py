"""``manage.py api_token create --institution uni --name moodle --scopes courses:read roster:write``
prints a new token once; ``api_token list`` and ``api_token revoke <prefix>`` manage them."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from api.models import ApiToken
from api.scopes import SCOPES, unknown_scopes
from api.services import token_create, token_revoke
from labs.models import Institution


class Command(BaseCommand):
    help = "Create, list or revoke institution API tokens (docs/lms.md 'REST API')."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="make a token and print it (shown only this once)")
        create.add_argument("--institution", required=True, help="the institution's slug")
        create.add_argument("--name", required=True)
        create.add_argument("--scopes", nargs="+", required=True, help=f"any of: {' '.join(SCOPES)}; 'all' for every one")
        create.add_argument("--expires-in-days", type=int, default=None)
        listing = sub.add_parser("list", help="the tokens (prefixes, never secrets)")
        listing.add_argument("--institution", default=None)
        revoke = sub.add_parser("revoke", help="revoke a token by its prefix")
        revoke.add_argument("prefix")

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _create(self, *, institution: str, name: str, scopes: list[str], expires_in_days: int | None, **_options) -> None:
        found = Institution.objects.filter(slug=institution).first()
        if found is None:
            raise CommandError(f"No institution has the slug {institution!r}.")
        scopes = list(SCOPES) if scopes == ["all"] else [s for part in scopes for s in part.split(",") if s]
        if unknown := unknown_scopes(scopes):
            raise CommandError(f"Unknown scopes {', '.join(unknown)}; use any of: {' '.join(SCOPES)}.")
        if expires_in_days is not None and expires_in_days < 1:
            raise CommandError("--expires-in-days must be at least 1.")
        expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
        _token, secret = token_create(institution=found, name=name, scopes=scopes, expires_at=expires_at)
        self.stdout.write(secret)

    def _list(self, *, institution: str | None, **_options) -> None:
        tokens = ApiToken.objects.select_related("institution").order_by("institution__slug", "created_at")
        if institution:
            tokens = tokens.filter(institution__slug=institution)
        for t in tokens:
            state = "revoked" if t.revoked_at else ("expired" if not t.is_usable() else "active")
            self.stdout.write(f"{t.prefix}…\t{t.institution.slug}\t{t.name}\t{state}\t{' '.join(t.scopes)}")

    def _revoke(self, *, prefix: str, **_options) -> None:
        matches = list(ApiToken.objects.select_related("institution").filter(prefix=prefix.rstrip("…")))
        if len(matches) != 1:
            raise CommandError(f"{len(matches)} tokens have the prefix {prefix!r}; give the full prefix.")
        if not token_revoke(token=matches[0], reason="manage.py api_token revoke"):
            self.stdout.write("It was revoked already.")
