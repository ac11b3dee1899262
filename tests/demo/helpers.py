"""Starting ``tests/demo/supervised.py`` and checking that what it started is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.conftest import ROOT, wait_for

SUPERVISED = Path(__file__).with_name("supervised.py")

# The ``spawn`` fixture: ``start`` in the test's tmp_path, with clean-up.
Spawn = Callable[..., subprocess.Popen[bytes]]


def supervised_env(work: Path, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in ("REDIS_URL", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(SUPERVISED_DIR=str(work), PYTHONPATH=str(ROOT), **extra)
    return env


def start(command: list[str], work: Path, **env: str) -> subprocess.Popen[bytes]:
    """``command`` in a session of its own (a signal to it never reaches pytest), SIGINT at its
    default action even if pytest runs where SIGINT is ignored (make would keep ignoring it)."""
    return subprocess.Popen(
        command,
        cwd=work,
        env=supervised_env(work, **env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def supervised_command() -> list[str]:
    return [sys.executable, str(SUPERVISED)]


def running_record(work: Path, process: subprocess.Popen[bytes]) -> dict:
    """``pids.json`` once the supervised children run (fails if ``process`` ends first)."""
    pids_file = work / "pids.json"

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}: {process.stdout.read().decode(errors='replace')}")
        return pids_file.exists()

    wait_for(ready, timeout=15, message="the supervised processes to start")
    return json.loads(pids_file.read_text())


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def assert_everything_stopped(work: Path, record: dict, received: str) -> None:
    wait_for(lambda: not is_running(record["supervisor"]), timeout=15, message="the supervisor to exit")
    assert (work / "stopped").read_text() == received
    # The supervisor reaps the services it started; what they started in turn dies of the
    # group's SIGKILL a moment later (the kernel's, not the supervisor's, to wait for).
    wait_for(
        lambda: not [pid for pid in record["pids"] if is_running(pid)],
        timeout=5,
        message=lambda: f"the children to exit: {[pid for pid in record['pids'] if is_running(pid)]} still run",
    )
