"""A stand-in for ``manage.py run_demo`` in the signal tests: the real ``StopSignals`` and
``Supervisor`` over plain processes instead of the portal's services.

``python supervised.py [manage.py run_demo]`` (arguments are ignored, so that the Makefile's
``demo`` recipe can run it as ``$(PY)``) works in ``$SUPERVISED_DIR``. It starts:

* ``service``, which starts a grandchild in its process group that ignores SIGTERM, and dies of
  SIGTERM itself, leaving the grandchild behind;
* ``stubborn``, which ignores SIGTERM.

Once they run it writes ``pids.json`` (its own pid, its parent's, every pid it is responsible for,
the ``REDIS_URL`` and ``FIELD_ENCRYPTION_KEY_FILE`` it was given); on a stop signal it stops them all (1 s grace) and writes
the signal's name to ``stopped``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from labs.supervisor import StopSignals, Supervisor

IGNORE_SIGTERM_AND_SLEEP = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
SERVICE = (
    "import subprocess, sys, time\n"
    "grandchild = subprocess.Popen([sys.executable, '-c', sys.argv[2]])\n"
    "open(sys.argv[1], 'w').write(str(grandchild.pid))\n"
    "time.sleep(600)\n"
)


def main() -> None:
    work = Path(os.environ["SUPERVISED_DIR"])
    signals = StopSignals()
    signals.install()
    supervisor = Supervisor(log_dir=work / "log")
    grandchild_file = work / "grandchild.pid"
    service = supervisor.start("service", [sys.executable, "-c", SERVICE, str(grandchild_file), IGNORE_SIGTERM_AND_SLEEP])
    stubborn = supervisor.start("stubborn", [sys.executable, "-c", IGNORE_SIGTERM_AND_SLEEP])
    while not grandchild_file.exists() or not grandchild_file.read_text():
        time.sleep(0.02)
    pids = [service.process.pid, stubborn.process.pid, int(grandchild_file.read_text())]
    record = {
        "supervisor": os.getpid(),
        "parent": os.getppid(),
        "pids": pids,
        "redis_url": os.environ.get("REDIS_URL"),
        "field_encryption_key_file": os.environ.get("FIELD_ENCRYPTION_KEY_FILE"),
    }
    (work / "pids.tmp").write_text(json.dumps(record))
    (work / "pids.tmp").rename(work / "pids.json")
    while not signals.requested:
        time.sleep(0.02)
    supervisor.stop_all(timeout=1.0)
    (work / "stopped").write_text(signals.received.name)


if __name__ == "__main__":
    main()
