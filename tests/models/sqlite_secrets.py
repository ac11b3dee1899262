"""Run by tests/models/test_sqlite_secrets.py in a new interpreter on an SQLite database (the
embedded demo's): a launch's webhook delivery is written in its transaction, the secrets are
stored encrypted, and the rotation command re-encrypts them there too. Prints one JSON line."""

import json

import django

django.setup()

from cryptography.fernet import Fernet  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import override_settings  # noqa: E402

call_command("migrate", verbosity=0)

from labs.services.sessions import session_launch  # noqa: E402
from lti.keys import key_rotate  # noqa: E402
from lti.models import ToolKey  # noqa: E402
from tests.factories import course_with_students, node_with_cards  # noqa: E402
from webhooks.models import Delivery, Subscription  # noqa: E402
from webhooks.services import subscription_create  # noqa: E402


def stored() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM webhooks_subscription")
        (secret,) = cursor.fetchone()
        cursor.execute("SELECT private_key_pem FROM lti_toolkey")
        (pem,) = cursor.fetchone()
    return [secret, pem]


node_with_cards()
course, templates, students, _instructor = course_with_students(1)
_subscription, secret = subscription_create(
    institution=course.institution, url="https://lms.example.edu/h", event_types=["session.queued"]
)
pem = key_rotate().private_key_pem
with transaction.atomic():
    session = session_launch(student=students[0], course=course, template=templates[0])
    delivered_in_transaction = list(Delivery.objects.values_list("event_type", "ordering_key"))

old = settings.FIELD_ENCRYPTION_KEYS[0]
new = Fernet.generate_key().decode()
encrypted = [secret not in stored()[0], "PRIVATE KEY" not in stored()[1]]
with override_settings(FIELD_ENCRYPTION_KEYS=[new, old]):
    call_command("field_encryption_rotate", verbosity=0)
with override_settings(FIELD_ENCRYPTION_KEYS=[new]):
    after_rotation = [Fernet(new).decrypt(v.encode()).decode() for v in stored()] == [secret, pem]
    readable = [Subscription.objects.get().secret, ToolKey.objects.get().private_key_pem] == [secret, pem]

print(
    json.dumps(
        {
            "vendor": connection.vendor,
            "delivered_in_transaction": delivered_in_transaction == [("session.queued", str(session.pk))],
            "encrypted": encrypted,
            "rotated": after_rotation,
            "readable_with_the_new_key_alone": readable,
        }
    )
)
