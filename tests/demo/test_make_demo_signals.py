"""`make demo` under real GNU make: ``kill -INT`` or ``kill -TERM`` to make's process stops the
demo and everything it started, as a terminal's Ctrl-C does; the demo gets its own Redis database.

The project's Makefile runs, with ``PY`` pointing at ``tests/demo/supervised.py`` (the real
supervisor over plain processes) and the ``demo`` target's prerequisites taken as made.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.demo.helpers import Spawn, assert_everything_stopped, running_record, supervised_command

pytestmark = [
    pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make"),
    pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc to check the processes"),
]


def make_demo_command(work: Path) -> list[str]:
    made = [
        f"-o{prerequisite}"
        for prerequisite in (
            ".venv/.installed-runtime",
            "var/secret_key",
            "var/agent_token",
            "var/field_encryption_key",
            "locale/zh_Hans/LC_MESSAGES/django.mo",
        )
    ]
    python = " ".join(supervised_command())
    return ["make", "--no-print-directory", "-f", str(ROOT / "Makefile"), "-C", str(work), *made, f"PY={python}", "demo"]


@pytest.mark.parametrize(
    ("signum", "received"),
    [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGTERM")],
    ids=["SIGINT", "SIGTERM", "SIGKILL"],
)
def test_a_signal_to_make_stops_the_demo_and_everything_it_started(
    tmp_path: Path, spawn: Spawn, signum: signal.Signals, received: str
) -> None:
    make = spawn(make_demo_command(tmp_path))
    record = running_record(tmp_path, make)
    assert record["parent"] == make.pid  # the recipe's shell gave way to the demo (exec)

    os.kill(make.pid, signum)

    assert_everything_stopped(tmp_path, record, received)
    make.wait(timeout=10)


def test_the_demo_uses_redis_database_15_unless_told_otherwise(tmp_path: Path, spawn: Spawn) -> None:
    make = spawn(make_demo_command(tmp_path))

    assert running_record(tmp_path, make)["redis_url"] == "redis://127.0.0.1:6379/15"


def test_the_demo_keeps_a_redis_url_it_is_given(tmp_path: Path, spawn: Spawn) -> None:
    make = spawn(make_demo_command(tmp_path), REDIS_URL="redis://127.0.0.1:6390/3")

    assert running_record(tmp_path, make)["redis_url"] == "redis://127.0.0.1:6390/3"


def test_the_demo_reads_its_encryption_key_from_the_file_make_made(tmp_path: Path, spawn: Spawn) -> None:
    make = spawn(make_demo_command(tmp_path))

    assert running_record(tmp_path, make)["field_encryption_key_file"] == str(tmp_path / "var" / "field_encryption_key")
