"""The outbox and the secrets encrypted at rest on SQLite, the embedded demo's database (the rest of
the suite runs them on PostgreSQL): a launch's delivery is written in its transaction, the webhook
secret and the LTI key are stored as ciphertext, and ``field_encryption_rotate`` re-encrypts them
(SQLite has no ``SELECT ... FOR UPDATE``: its transaction's write lock stands in)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, child_env

SCRIPT = Path(__file__).with_name("sqlite_secrets.py")


def test_the_outbox_encryption_and_rotation_work_on_sqlite(tmp_path):
    env = child_env(DATABASE_URL=f"sqlite:///{tmp_path / 'portal.sqlite3'}", PORTAL_VAR_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "vendor": "sqlite",
        "delivered_in_transaction": True,
        "encrypted": [True, True],
        "rotated": True,
        "readable_with_the_new_key_alone": True,
    }
