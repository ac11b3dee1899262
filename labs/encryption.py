"""Secrets encrypted at rest: the LTI tool's private keys and the webhook signing secrets.

A value is encrypted with Fernet (``cryptography``: AES-128-CBC and HMAC-SHA256, a random IV
each time) under the keys of ``settings.FIELD_ENCRYPTION_KEYS`` (``FIELD_ENCRYPTION_KEY`` or
``FIELD_ENCRYPTION_KEY_FILE``: one key or several, comma or line separated). The first key
encrypts; every key decrypts (``MultiFernet``), so keys are rotated without downtime: put a new
key first, run ``manage.py field_encryption_rotate`` (every stored value re-encrypted with it),
then drop the old key (docs/security.md "Encryption at rest").

A value no configured key decrypts (a key dropped too early, a wrong key, a tampered row)
raises ``UndecryptableValue`` naming the field: never garbage.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction

HELP = 'see docs/security.md "Encryption at rest"'


class UndecryptableValue(ImproperlyConfigured):
    """A stored value that none of the configured keys decrypts."""


def _fernet() -> MultiFernet:
    keys = tuple(settings.FIELD_ENCRYPTION_KEYS)
    if not keys:
        raise ImproperlyConfigured(
            "FIELD_ENCRYPTION_KEY is not set: the LTI tool's private keys and the webhook signing secrets are"
            f" stored encrypted with it. Set FIELD_ENCRYPTION_KEY or FIELD_ENCRYPTION_KEY_FILE ({HELP})."
        )
    return _multi_fernet(keys)


@lru_cache(maxsize=8)
def _multi_fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def encrypt(plaintext: str) -> str:
    """``plaintext`` encrypted with the first key, as ASCII text (a Fernet token)."""
    return _fernet().encrypt(plaintext.encode()).decode("ascii")


def decrypt(token: str, *, what: str = "a stored secret") -> str:
    """The plaintext of ``token``; ``UndecryptableValue`` when no configured key decrypts it."""
    try:
        return _fernet().decrypt(token.encode("ascii")).decode()
    except (InvalidToken, UnicodeEncodeError):
        raise UndecryptableValue(
            f"{what} cannot be decrypted with any key in FIELD_ENCRYPTION_KEY: it was encrypted with a key that is"
            f" not configured (or it was altered). Configure that key again, after the current one ({HELP})."
        ) from None


class EncryptedTextField(models.TextField):
    """Text kept encrypted in the database (``encrypt``) and plain in Python.

    The empty string and ``None`` are stored as they are (a check that a value is there still
    works). A stored value differs at every save (a random IV), so the field cannot be filtered
    or ordered on: only read and written.
    """

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(value)

    def from_db_value(self, value, expression, connection):
        if value is None or value == "":
            return value
        return decrypt(value, what=f"{self.model._meta.label}.{self.name}")


def encrypted_fields() -> list[tuple[type[models.Model], EncryptedTextField]]:
    """Every encrypted field of every installed model."""
    return [
        (model, field)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, EncryptedTextField)
    ]


def encrypted_values_rotate() -> dict[str, int]:
    """Encrypt every stored value again with the first key, in one transaction; returns how
    many values of each field (``app.Model.field``). Raises ``UndecryptableValue`` (and changes
    nothing) when a value is not readable with the configured keys."""
    fernet = _fernet()
    counts: dict[str, int] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        for model, field in encrypted_fields():
            label = f"{model._meta.label}.{field.name}"
            names = (model._meta.db_table, field.column, model._meta.pk.column)
            table, column, pk = (connection.ops.quote_name(name) for name in names)
            # Locked until the end (SQLite's transactions take its one write lock at the start): a
            # secret rotated meanwhile waits, and is not overwritten with the value read here.
            lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
            cursor.execute(f"SELECT {pk}, {column} FROM {table} WHERE {column} <> %s{lock}", [""])
            rows = cursor.fetchall()
            for row_pk, token in rows:
                try:
                    rotated = fernet.rotate(token.encode("ascii")).decode("ascii")
                except (InvalidToken, UnicodeEncodeError):
                    decrypt(token, what=f"{label} of row {row_pk}")  # raises, naming it
                cursor.execute(f"UPDATE {table} SET {column} = %s WHERE {pk} = %s", [rotated, row_pk])
            counts[label] = len(rows)
    return counts


def column_encrypt(schema_editor, *, table: str, column: str, plaintext_prefix: str) -> int:
    """For a data migration: encrypt the values of ``table.column`` still in clear (those that
    start with ``plaintext_prefix``, which no Fernet token does); returns how many."""
    return _column_convert(schema_editor, table, column, lambda value: value.startswith(plaintext_prefix), encrypt)


def column_decrypt(schema_editor, *, table: str, column: str, plaintext_prefix: str) -> int:
    """For a data migration undone: the values of ``table.column`` back in clear; returns how many."""
    return _column_convert(
        schema_editor, table, column, lambda value: not value.startswith(plaintext_prefix), lambda value: decrypt(value)
    )


def _column_convert(schema_editor, table: str, column: str, wanted, convert) -> int:
    quoted_table, quoted_column = schema_editor.quote_name(table), schema_editor.quote_name(column)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {quoted_column} FROM {quoted_table} WHERE {quoted_column} <> %s", [""])
        rows = [(pk, value) for pk, value in cursor.fetchall() if wanted(value)]
        for pk, value in rows:
            cursor.execute(f"UPDATE {quoted_table} SET {quoted_column} = %s WHERE id = %s", [convert(value), pk])
    return len(rows)


@checks.register(checks.Tags.security)
def keys_configured_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Outside the embedded demo (SQLite), the portal does not start without an encryption key
    (``manage.py migrate`` and ``check`` refuse; the web's migrate init container runs them)."""
    if settings.FIELD_ENCRYPTION_KEYS or settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        return []
    return [
        checks.Error(
            "FIELD_ENCRYPTION_KEY is not set: the LTI tool's private keys and the webhook signing secrets are stored"
            " encrypted with it.",
            hint=f"Set FIELD_ENCRYPTION_KEY or FIELD_ENCRYPTION_KEY_FILE to a Fernet key ({HELP}).",
            id="labs.E001",
        )
    ]
