"""docs/settings.md is generated from the settings table, and the table holds every variable the settings read.

The second test runs portal/settings.py in this process under several environments (each driver,
each channel layer, SQLite and PostgreSQL URLs) and records every name handed to portal.env's
reader, so a variable read around the table (a bare ``env_str("NEW")``) fails it.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

import portal.env
from portal import settings_doc
from portal.settings_table import COMPUTED, SETTINGS

ROOT = Path(__file__).resolve().parents[1]

ENVIRONMENTS = [
    {"LAB_DRIVER": "labs.drivers.local.LocalDriver", "DATABASE_URL": "sqlite:///portal.sqlite3"},
    {"LAB_DRIVER": "labs.drivers.simulator.SimulatorDriver", "CHANNELS_LAYER": "list"},
    {
        "LAB_DRIVER": "labs.drivers.kubernetes.KubernetesDriver",
        "LAB_K8S_URL_PATTERN": "https://labs.example.edu/{session_id}/",
        "DATABASE_URL": "postgres://portal@127.0.0.1:5432/portal",
    },
]


def test_the_committed_settings_page_is_what_the_table_generates():
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")

    assert page == settings_doc.render(), "docs/settings.md is stale: run `make settings-doc`"
    assert settings_doc.main(["--check"]) == 0


def test_every_setting_has_a_type_a_default_and_help():
    for setting in SETTINGS.values():
        assert setting.help.strip(), setting.name
        assert setting.default is not COMPUTED or setting.default_doc, f"{setting.name}: a computed default needs words"


def test_every_variable_the_settings_read_is_in_the_table(monkeypatch, tmp_path):
    read: set[str] = set()
    raw = portal.env._raw

    def recording_raw(name: str) -> str | None:
        read.add(name)
        return raw(name)

    monkeypatch.setattr(portal.env, "_raw", recording_raw)
    for environment in ENVIRONMENTS:
        with monkeypatch.context() as patch:
            for name in SETTINGS:
                patch.delenv(name, raising=False)
                patch.delenv(f"{name}_FILE", raising=False)
            patch.setenv("SECRET_KEY", "k" * 40)
            patch.setenv("PORTAL_VAR_DIR", str(tmp_path))
            for name, value in environment.items():
                patch.setenv(name, value)
            runpy.run_path(str(ROOT / "portal" / "settings.py"))

    assert read - set(SETTINGS) == set(), "read by portal/settings.py but missing from portal/settings_table.py"
    assert set(SETTINGS) - read == set(), "in portal/settings_table.py but never read"


@pytest.mark.parametrize("name", ["CHANNELS_LAYER", "SESSION_COOKIE_SAMESITE"])
def test_a_value_outside_a_settings_choices_is_refused_naming_them(monkeypatch, name):
    from django.core.exceptions import ImproperlyConfigured

    from portal.settings_table import env_setting

    monkeypatch.setenv(name, "sideways")

    with pytest.raises(ImproperlyConfigured, match=rf"^{name}='sideways': use .+ or .+\.$"):
        env_setting(name)
