"""`make demo` makes its encryption key (var/field_encryption_key) the way it makes its secret key:
a Fernet key, readable by its owner only, kept across runs."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def make_key(work: Path) -> Path:
    command = ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(work), f"PYTHON={sys.executable}"]
    subprocess.run([*command, "var/field_encryption_key"], check=True, capture_output=True, timeout=60)
    return work / "var" / "field_encryption_key"


def test_make_writes_a_fernet_key_only_its_owner_may_read(tmp_path: Path) -> None:
    path = make_key(tmp_path)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = Fernet(path.read_text().strip()).encrypt(b"secret")
    assert Fernet(path.read_text().strip()).decrypt(token) == b"secret"


def test_a_second_make_keeps_the_key(tmp_path: Path) -> None:
    first = make_key(tmp_path).read_text()

    assert make_key(tmp_path).read_text() == first
