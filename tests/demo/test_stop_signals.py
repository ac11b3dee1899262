"""A stop signal to the supervising process stops every service it started, and what they left."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.demo.helpers import Spawn, assert_everything_stopped, is_running, running_record, supervised_command

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc to check the processes")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_stops_every_child_and_what_they_left(tmp_path: Path, spawn: Spawn, signum: signal.Signals) -> None:
    supervisor = spawn(supervised_command())
    record = running_record(tmp_path, supervisor)

    os.kill(record["supervisor"], signum)

    assert_everything_stopped(tmp_path, record, signum.name)
    assert supervisor.wait(timeout=5) == 0


def test_later_signals_do_not_interrupt_the_stop(tmp_path: Path, spawn: Spawn) -> None:
    supervisor = spawn(supervised_command())
    record = running_record(tmp_path, supervisor)

    os.kill(record["supervisor"], signal.SIGTERM)
    # Within the stop: the service has died of its SIGTERM, and the child that ignores SIGTERM
    # keeps the stop busy for its 1 s of grace.
    service = record["pids"][0]
    wait_for(lambda: not is_running(service), timeout=5, interval=0.02, message="the service stopped")
    os.kill(record["supervisor"], signal.SIGINT)
    os.kill(record["supervisor"], signal.SIGHUP)

    assert_everything_stopped(tmp_path, record, "SIGTERM")
    assert supervisor.wait(timeout=5) == 0


def test_after_the_first_stop_signal_the_kernel_ignores_the_others(tmp_path: Path) -> None:
    # A later signal ignored only by Python's handler killed the supervisor when it came as the
    # interpreter ended (Python sets handled signals back to their default action then): the
    # kernel must ignore them from the first on.
    import subprocess
    import sys

    script = (
        "import os, signal\n"
        "from labs.supervisor import StopSignals\n"
        "signals = StopSignals()\n"
        "signals.install()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "assert signals.received == signal.SIGTERM\n"
        "status = open('/proc/self/status').read()\n"
        "print([line.split()[1] for line in status.splitlines() if line.startswith('SigIgn:')][0])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    ignored = int(done.stdout.strip(), 16)
    assert all(ignored & (1 << (signum - 1)) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
