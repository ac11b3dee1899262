from django.core.management.base import BaseCommand

from lti.keys import key_rotate


class Command(BaseCommand):
    help = (
        "Make a new active LTI tool key. The previous key stays in /lti/jwks/ for LTI_KEY_GRACE_DAYS "
        "so platforms that cached it keep verifying; the private key is never printed."
    )

    def handle(self, *args, **options) -> None:
        key = key_rotate()
        self.stdout.write(f"new active key: kid={key.kid}")
