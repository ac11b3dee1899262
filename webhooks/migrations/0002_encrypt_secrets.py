"""Webhook signing secrets encrypted at rest; the ones stored in clear are encrypted here.

The keys come from FIELD_ENCRYPTION_KEY (docs/security.md "Encryption at rest"): with values in clear
and no key, the migration stops naming the variable."""

from django.db import migrations

import labs.encryption


def encrypt_plaintext(apps, schema_editor):
    labs.encryption.column_encrypt(schema_editor, table="webhooks_subscription", column="secret", plaintext_prefix="whsec_")


def decrypt_ciphertext(apps, schema_editor):
    labs.encryption.column_decrypt(schema_editor, table="webhooks_subscription", column="secret", plaintext_prefix="whsec_")


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="subscription",
            name="secret",
            field=labs.encryption.EncryptedTextField(editable=False),
        ),
        migrations.RunPython(encrypt_plaintext, decrypt_ciphertext),
    ]
