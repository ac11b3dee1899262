"""The demo's /metrics token: made once in var/metrics_token (mode 0600), or the one the environment names."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from django.core.management.base import CommandError

from labs.management.commands.run_demo import metrics_token_file, token_file_ensure


def test_the_first_run_writes_a_token_only_its_owner_may_read(tmp_path: Path) -> None:
    path = metrics_token_file(tmp_path / "var", {})

    assert path == tmp_path / "var" / "metrics_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) >= 32


def test_later_runs_keep_the_token(tmp_path: Path) -> None:
    first = token_file_ensure(tmp_path / "metrics_token").read_text()

    assert token_file_ensure(tmp_path / "metrics_token").read_text() == first


def test_two_demos_get_different_tokens(tmp_path: Path) -> None:
    one = token_file_ensure(tmp_path / "a" / "metrics_token").read_text()
    two = token_file_ensure(tmp_path / "b" / "metrics_token").read_text()

    assert one != two


def test_an_empty_token_file_is_refused_rather_than_used(tmp_path: Path) -> None:
    (tmp_path / "metrics_token").write_text("\n")

    with pytest.raises(CommandError, match="is empty"):
        token_file_ensure(tmp_path / "metrics_token")


def test_a_token_file_named_in_the_environment_is_used_as_it_is(tmp_path: Path) -> None:
    mine = tmp_path / "my-token"

    assert metrics_token_file(tmp_path / "var", {"METRICS_TOKEN_FILE": str(mine)}) == mine
    assert not (tmp_path / "var" / "metrics_token").exists()


def test_a_token_in_the_environment_needs_no_file(tmp_path: Path) -> None:
    assert metrics_token_file(tmp_path / "var", {"METRICS_TOKEN": "from-the-environment"}) is None
    assert not (tmp_path / "var" / "metrics_token").exists()
