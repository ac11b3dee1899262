from django.core.management.base import BaseCommand, CommandError

from labs.encryption import UndecryptableValue, encrypted_values_rotate


class Command(BaseCommand):
    help = (
        "Encrypt every secret stored encrypted (the LTI tool's private keys, the webhook signing secrets) again "
        "with the first key of FIELD_ENCRYPTION_KEY, in one transaction. Run it after putting a new key first; "
        'then the old key can go (docs/security.md "Encryption at rest"). Nothing secret is printed.'
    )

    def handle(self, *args, **options) -> None:
        try:
            counts = encrypted_values_rotate()
        except UndecryptableValue as exc:
            raise CommandError(f"{exc} Nothing was changed.") from None
        for label, count in counts.items():
            self.stdout.write(f"{label}: {count} re-encrypted with the first key")
