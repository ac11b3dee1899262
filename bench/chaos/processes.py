"""The processes ``make chaos`` starts and faults: PostgreSQL, Redis, Daphne, Celery, the agents."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.harness import ROOT


def postgres_bindir() -> Path:
    """Where ``initdb`` and ``pg_ctl`` are: on PATH, else Debian's newest ``/usr/lib/postgresql/*/bin``."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(x) for x in Path(p).parent.name.split(".")])
    for candidate in reversed(candidates):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    raise SystemExit("chaos needs PostgreSQL's server binaries (initdb, pg_ctl): apt-get install postgresql")


class PostgresServer:
    """A PostgreSQL server of the run's own in a temporary directory: the harness may stop it.

    As root, the server runs as the ``postgres`` user (PostgreSQL refuses root); otherwise as
    the current user. Durability is off (``fsync``): the data is thrown away after the run.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.bindir = postgres_bindir()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            import pwd

            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise SystemExit("chaos runs as root but there is no postgres user to run its PostgreSQL server") from None
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="npu-lab-chaos-pg-"))
        if self.as_user:
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"

    def _run(self, *argv: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self.as_user, *argv], capture_output=True, text=True, timeout=timeout, cwd=self.dir, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            raise SystemExit(f"{Path(argv[0]).name} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")

    def init(self) -> None:
        initdb = str(self.bindir / "initdb")
        self._run(initdb, "-D", str(self.data), "--auth=trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "--locale=C")

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} -c max_connections=200 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=64MB"
        )
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30", "-o", options, "start"
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class Proc:
    """A child process in its own process group, its output appended to a log across restarts."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, pass_fds: tuple[int, ...] = ()) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.pass_fds = pass_fds
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self.offset = 0
        # Set while the harness itself has it down; the supervisor restarts it otherwise.
        self.expected_down = True
        self.lock = threading.RLock()

    def start(self) -> None:
        with self.lock:
            self.offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:
                log.write(f"\n===== chaos: start {self.name}\n".encode())
                log.flush()
                self.process = subprocess.Popen(
                    self.argv,
                    cwd=ROOT,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    pass_fds=self.pass_fds,
                )
            self.expected_down = False

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else 0

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_since_start(self) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(self.offset)
            return log.read().decode(errors="replace")

    def wait_for_log(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log_since_start():
                return True
            if not self.alive():
                return False
            time.sleep(0.1)
        return False

    def signal_group(self, signum: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)

    def kill9(self) -> None:
        self.expected_down = True
        self.signal_group(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self, timeout: float = 15.0) -> None:
        self.expected_down = True
        if self.alive():
            self.signal_group(signal.SIGCONT)  # a paused agent must hear the SIGTERM
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        if self.process is not None:
            # Prefork children of a worker stopped by SIGTERM leave with it; anything left goes now.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


def redis_up(port: int) -> bool:
    import redis

    return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, socket_connect_timeout=0.5).ping())


def agent_up(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
        return response.status == 200
