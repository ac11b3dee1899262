"""portal.settings read from the environment: safe defaults, and a clear refusal of bad values.

Each case starts a fresh interpreter with ``DJANGO_SETTINGS_MODULE=portal.settings``, because
settings are read once at import time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from labs.drivers import get_driver

ROOT = Path(__file__).resolve().parents[1]
SECRET = "k" * 40

# Every variable portal.settings reads (the test run itself sets some of them, in tests/settings.py).
SETTINGS_VARIABLES = set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', (ROOT / "portal" / "settings.py").read_text()))

PRINT_SETTINGS = """
import hashlib, json
import django
django.setup()
from django.conf import settings
db = settings.DATABASES["default"]
print(json.dumps({
    "DEBUG": settings.DEBUG,
    "ENGINE": db["ENGINE"],
    "NAME": str(db["NAME"]),
    "OPTIONS": db.get("OPTIONS", {}),
    "SECRET_KEY_SHA256": hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest(),
    "REDIS_URL": settings.REDIS_URL,
}))
"""


def run_settings(tmp_path: Path, **env: str | None) -> subprocess.CompletedProcess[str]:
    """Import portal.settings in a new interpreter with a clean environment plus ``env`` (None removes)."""
    environment = {
        k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES and k.removesuffix("_FILE") not in SETTINGS_VARIABLES
    }
    environment.update(
        DJANGO_SETTINGS_MODULE="portal.settings", PYTHONPATH=str(ROOT), SECRET_KEY=SECRET, PORTAL_VAR_DIR=str(tmp_path)
    )
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60
    )


def loaded(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def refused(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    assert "ImproperlyConfigured" in result.stderr
    return result.stderr


def sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def test_the_defaults_use_sqlite_in_the_var_dir_with_immediate_transactions(tmp_path):
    settings = loaded(run_settings(tmp_path))
    assert settings["ENGINE"] == "django.db.backends.sqlite3"
    assert settings["NAME"] == str(tmp_path / "portal.sqlite3")
    assert settings["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert settings["REDIS_URL"] == "redis://127.0.0.1:6379/0"
    assert settings["SECRET_KEY_SHA256"] == sha256(SECRET)


def test_debug_is_off_unless_set(tmp_path):
    assert loaded(run_settings(tmp_path))["DEBUG"] is False
    assert loaded(run_settings(tmp_path, DEBUG="true"))["DEBUG"] is True
    assert loaded(run_settings(tmp_path, DEBUG="0"))["DEBUG"] is False


def test_a_debug_value_that_is_not_a_boolean_stops_the_portal(tmp_path):
    stderr = refused(run_settings(tmp_path, DEBUG="maybe"))
    assert "DEBUG" in stderr
    assert "not a boolean" in stderr


def test_a_missing_secret_key_names_both_ways_to_set_it(tmp_path):
    stderr = refused(run_settings(tmp_path, SECRET_KEY=None))
    assert "SECRET_KEY" in stderr
    assert "SECRET_KEY_FILE" in stderr


def test_the_secret_key_is_read_from_a_file_and_never_printed(tmp_path):
    value = "file-secret-" + "x" * 40
    key_file = tmp_path / "secret_key"
    key_file.write_text(value + "\n")
    result = run_settings(tmp_path, SECRET_KEY=None, SECRET_KEY_FILE=str(key_file))
    assert loaded(result)["SECRET_KEY_SHA256"] == sha256(value)
    assert value not in result.stdout
    assert value not in result.stderr


def test_a_short_secret_key_is_refused_without_printing_it(tmp_path):
    value = "short-secret-value"
    key_file = tmp_path / "secret_key"
    key_file.write_text(value)
    for result in (
        run_settings(tmp_path, SECRET_KEY=value),
        run_settings(tmp_path, SECRET_KEY=None, SECRET_KEY_FILE=str(key_file)),
    ):
        stderr = refused(result)
        assert "SECRET_KEY must be at least 32 characters" in stderr
        assert value not in stderr
        assert value not in result.stdout


def test_an_unreadable_secret_key_file_is_refused(tmp_path):
    stderr = refused(run_settings(tmp_path, SECRET_KEY=None, SECRET_KEY_FILE=str(tmp_path / "missing")))
    assert "SECRET_KEY_FILE cannot be read" in stderr


def test_a_mysql_database_url_is_refused_naming_the_variable(tmp_path):
    stderr = refused(run_settings(tmp_path, DATABASE_URL="mysql://user:hunter2pass@db.example:3306/portal"))
    assert "DATABASE_URL" in stderr
    assert "'mysql'" in stderr
    assert "hunter2pass" not in stderr


def test_a_postgres_database_url_is_parsed(tmp_path):
    settings = loaded(run_settings(tmp_path, DATABASE_URL="postgres://u:p@h:5432/db"))
    assert settings["ENGINE"] == "django.db.backends.postgresql"
    assert settings["NAME"] == "db"
    assert "transaction_mode" not in settings["OPTIONS"]


def test_a_redis_url_that_is_not_redis_is_refused(tmp_path):
    stderr = refused(run_settings(tmp_path, REDIS_URL="http://x"))
    assert "REDIS_URL" in stderr
    assert "not a Redis URL" in stderr


def test_a_celery_visibility_timeout_that_is_not_a_number_is_refused(tmp_path):
    stderr = refused(run_settings(tmp_path, CELERY_VISIBILITY_TIMEOUT="abc"))
    assert "CELERY_VISIBILITY_TIMEOUT" in stderr
    assert "not an integer" in stderr


@pytest.fixture
def fresh_driver():
    """Build the driver from the settings of this test, and forget it afterwards."""
    get_driver.cache_clear()
    yield
    get_driver.cache_clear()


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("labs.drivers.nope.Driver", "'labs.drivers.nope.Driver' cannot be imported"),
        ("labs.models.Node", "is not a ClusterDriver"),
    ],
)
def test_a_lab_driver_that_is_not_a_driver_is_refused_with_a_clear_message(fresh_driver, backend, message):
    with override_settings(LAB_DRIVER={"BACKEND": backend, "OPTIONS": {}}), pytest.raises(ImproperlyConfigured, match=message):
        get_driver()
