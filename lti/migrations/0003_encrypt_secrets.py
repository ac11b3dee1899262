"""The LTI tool's private keys encrypted at rest; the ones stored in clear are encrypted here.

The keys come from FIELD_ENCRYPTION_KEY (docs/security.md "Encryption at rest"): with values in clear
and no key, the migration stops naming the variable."""

import labs.encryption
from django.db import migrations


def encrypt_plaintext(apps, schema_editor):
    labs.encryption.column_encrypt(schema_editor, table="lti_toolkey", column="private_key_pem", plaintext_prefix="-----BEGIN")


def decrypt_ciphertext(apps, schema_editor):
    labs.encryption.column_decrypt(schema_editor, table="lti_toolkey", column="private_key_pem", plaintext_prefix="-----BEGIN")


class Migration(migrations.Migration):

    dependencies = [
        ('lti', '0002_score_outbox'),
    ]

    operations = [
        migrations.AlterField(
            model_name='toolkey',
            name='private_key_pem',
            field=labs.encryption.EncryptedTextField(),
        ),
        migrations.RunPython(encrypt_plaintext, decrypt_ciphertext),
    ]
