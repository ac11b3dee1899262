from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.demo.helpers import is_running, start


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``helpers.start`` in ``tmp_path``; after the test, kills whatever is still running of what
    it started (there is something only when the test failed)."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn_(command: list[str], **env: str) -> subprocess.Popen[bytes]:
        process = start(command, tmp_path, **env)
        started.append(process)
        return process

    yield spawn_
    record_file = tmp_path / "pids.json"
    record = json.loads(record_file.read_text()) if record_file.exists() else {"supervisor": None, "pids": []}
    leftovers = [process.pid for process in started] + [record["supervisor"], *record["pids"]]
    for pid in filter(None, leftovers):
        if is_running(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for process in started:
        process.wait(timeout=10)
        process.stdout.close()
