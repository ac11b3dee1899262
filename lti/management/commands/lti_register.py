from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from labs.models import Institution
from lti.services import registration_save

# The option that gave each field, to name it in a refusal.
OPTIONS = {
    "issuer": "--issuer",
    "auth_login_url": "--login-url",
    "auth_token_url": "--token-url",
    "keyset_url": "--keyset-url",
}


class Command(BaseCommand):
    help = "Register an LMS (LTI 1.3 platform) for an institution, or update it (same issuer and client id)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--institution", required=True, help="the institution's slug")
        parser.add_argument("--name", required=True)
        parser.add_argument("--issuer", required=True)
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--login-url", required=True, help="the platform's OIDC authentication URL")
        parser.add_argument("--token-url", required=True, help="the platform's OAuth2 access token URL")
        parser.add_argument("--keyset-url", required=True, help="the platform's public keyset (JWKS) URL")
        parser.add_argument("--audience", default="", help="the token audience, when not the token URL")
        parser.add_argument("--deployment", action="append", required=True, help="a deployment id (repeat for more)")

    def handle(self, *args, **o) -> None:
        from lti.models import Registration

        institution = Institution.objects.filter(slug=o["institution"]).first()
        if institution is None:
            raise CommandError(f"no institution has the slug {o['institution']!r}")
        existing = Registration.objects.filter(issuer=o["issuer"], client_id=o["client_id"]).first()
        if existing is not None and existing.institution_id != institution.pk:
            raise CommandError("this issuer and client id are registered for another institution")
        fields = {
            "name": o["name"],
            "issuer": o["issuer"],
            "client_id": o["client_id"],
            "auth_login_url": o["login_url"],
            "auth_token_url": o["token_url"],
            "auth_audience": o["audience"],
            "keyset_url": o["keyset_url"],
        }
        try:
            registration = registration_save(
                by=None, institution=institution, fields=fields, deployment_ids=o["deployment"], registration=existing
            )
        except ValidationError as exc:
            refusals = [f"{OPTIONS.get(field, field)}: {' '.join(messages)}" for field, messages in exc.message_dict.items()]
            raise CommandError("; ".join(refusals)) from exc
        self.stdout.write(f"registered {registration.name} (id {registration.pk})")
