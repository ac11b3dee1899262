"""``manage.py api_token create --institution uni --name moodle --scopes courses:read roster:write``
prints a new token once; ``api_token list`` and ``api_token revoke <prefix>`` manage them."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import CommandError
from django.utils import timezone

from api.management.credentials import CredentialCommand
from api.models import ApiToken
from api.services import token_create, token_revoke


class Command(CredentialCommand):
    help = "Create, list or revoke institution API tokens (docs/lms.md 'REST API')."
    create_help = "make a token and print it (shown only this once)"
    list_help = "the tokens (prefixes, never secrets)"
    revoke_help = "revoke a token by its prefix"
    revoke_arg = "prefix"

    def add_create_arguments(self, create) -> None:
        create.add_argument("--expires-in-days", type=int, default=None)

    def _create(self, *, institution: str, name: str, scopes: list[str], expires_in_days: int | None, **_options) -> None:
        found = self.institution(institution)
        scopes = self.scopes(scopes)
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
