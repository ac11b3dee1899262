"""What ``manage.py api_token`` and ``manage.py oauth_client`` share: the create / list / revoke
subcommands, the institution looked up by slug and the scopes checked against ``api.scopes``."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from api.scopes import SCOPES, unknown_scopes
from labs.models import Institution


class CredentialCommand(BaseCommand):
    """``create --institution --name --scopes``, ``list [--institution]``, ``revoke <revoke_arg>``;
    a subclass sets the helps and ``revoke_arg``, may add options to ``create``, and writes
    ``_create``, ``_list`` and ``_revoke``."""

    what = ""  # "a token", "a client"
    create_help = list_help = revoke_help = ""
    revoke_arg = ""

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help=self.create_help)
        create.add_argument("--institution", required=True, help="the institution's slug")
        create.add_argument("--name", required=True)
        create.add_argument("--scopes", nargs="+", required=True, help=f"any of: {' '.join(SCOPES)}; 'all' for every one")
        self.add_create_arguments(create)
        listing = sub.add_parser("list", help=self.list_help)
        listing.add_argument("--institution", default=None)
        revoke = sub.add_parser("revoke", help=self.revoke_help)
        revoke.add_argument(self.revoke_arg)

    def add_create_arguments(self, create) -> None:
        """More options of ``create`` (none by default)."""

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    @staticmethod
    def institution(slug: str) -> Institution:
        found = Institution.objects.filter(slug=slug).first()
        if found is None:
            raise CommandError(f"No institution has the slug {slug!r}.")
        return found

    @staticmethod
    def scopes(given: list[str]) -> list[str]:
        """``given`` (space- or comma-separated; ``all``: every scope), each checked."""
        scopes = list(SCOPES) if given == ["all"] else [s for part in given for s in part.split(",") if s]
        if unknown := unknown_scopes(scopes):
            raise CommandError(f"Unknown scopes {', '.join(unknown)}; use any of: {' '.join(SCOPES)}.")
        return scopes
