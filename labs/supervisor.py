"""Processes of ``make demo``: started with their output in log files, stopped in order on a signal.

Each service runs in a process group of its own, so a terminal's Ctrl-C reaches only the
supervising process, which then stops the services one at a time, newest first (the web server
before the worker, a Redis the demo started last). ``StopSignals`` turns SIGINT, SIGTERM and
SIGHUP into one flag, whether they were sent to the supervising process or to the GNU make that
runs it. No Django here: the pieces are tested with plain child processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

STOP_TIMEOUT_SECONDS = 15.0
KILL_WAIT_SECONDS = 5.0
POLL_SECONDS = 0.1
CONNECT_TIMEOUT_SECONDS = 0.5
PARENT_POLL_SECONDS = 0.2
LOG_TAIL_BYTES = 4096
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A server bound to every address is reached on the loopback one.
WILDCARD_HOSTS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


class NotListening(Exception):
    """The server did not accept a connection in time, or ``give_up`` gave a reason to stop waiting."""


def accepts_connections(host: str, port: int) -> bool:
    """Whether a TCP connection to ``host:port`` is accepted now."""
    try:
        with socket.create_connection((WILDCARD_HOSTS.get(host, host), port), timeout=CONNECT_TIMEOUT_SECONDS):
            return True
    except OSError:
        return False


def wait_until_listening(host: str, port: int, *, timeout: float, give_up: Callable[[], str | None] = lambda: None) -> None:
    """Return as soon as ``host:port`` accepts a TCP connection.

    ``give_up`` is asked between attempts; the first reason it returns (the server exited, a stop
    was asked for) raises ``NotListening`` with that reason, as does ``timeout`` seconds without
    a connection.
    """
    deadline = time.monotonic() + timeout
    while True:
        reason = give_up()
        if reason:
            raise NotListening(reason)
        if accepts_connections(host, port):
            return
        if time.monotonic() >= deadline:
            raise NotListening(f"nothing accepted a connection on {host}:{port} within {timeout:g} s")
        time.sleep(POLL_SECONDS)


@dataclass
class Service:
    """A started process, the leader of its own process group, writing to ``log_path``."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def exited(self) -> bool:
        """Whether the main process has ended. It is not reaped here: until ``Supervisor.stop``
        reaps it, its pid stays taken, so its process group id cannot name anyone else's group."""
        if self.process.returncode is not None:
            return True
        try:
            result = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return result is not None

    def last_log_line(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - LOG_TAIL_BYTES))
                tail = log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        return lines[-1] if lines else ""


class Supervisor:
    """Starts services with their output in ``log_dir/<name>.log`` and stops them all, newest first."""

    def __init__(self, *, log_dir: Path, cwd: Path | None = None) -> None:
        self.log_dir = log_dir
        self.cwd = cwd
        self.services: list[Service] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, command: list[str], *, env: dict[str, str] | None = None) -> Service:
        """Start ``command`` in a new session (its own process group), stdin closed, stdout and
        stderr to ``<name>.log`` (truncated: it holds this run only)."""
        log_path = self.log_dir / f"{name}.log"
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            process = subprocess.Popen(
                command,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(log_fd)
        service = Service(name, process, log_path)
        self.services.append(service)
        return service

    def started(self, name: str) -> bool:
        return any(service.name == name for service in self.services)

    def first_exited(self) -> Service | None:
        """The first service whose main process has ended, if any."""
        return next((service for service in self.services if service.exited()), None)

    def stop_all(self, *, timeout: float = STOP_TIMEOUT_SECONDS, report: Callable[[Service], None] = lambda _: None) -> None:
        """Stop every service, newest first, each before the next (a worker still stopping needs
        the Redis started before it); ``report`` is called as each one is gone."""
        for service in reversed(self.services):
            self.stop(service, timeout=timeout)
            report(service)

    def stop(self, service: Service, *, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """SIGTERM to the main process; SIGKILL to its group after ``timeout`` seconds. Then
        whatever is left of the group (a child the main process did not take with it) is killed,
        and the main process is reaped."""
        if not service.exited():
            # The main process only: Celery and Daphne stop their own children in order, while a
            # signal to the whole group would kill pool children mid-task.
            with contextlib.suppress(ProcessLookupError):
                service.process.send_signal(signal.SIGTERM)
            if not _wait_exited(service, timeout):
                _kill_group(service.process.pid)
                _wait_exited(service, KILL_WAIT_SECONDS)
        # The main process has ended but is not reaped, so the group id is still its own.
        _kill_group(service.process.pid)
        service.process.wait()


def _wait_exited(service: Service, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not service.exited():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP record a stop request instead of ending the process, so that
    the supervisor can stop its services in order; later ones are ignored, the first is kept in
    ``received``. ``install`` also starts a ``ParentWatch`` when GNU make runs this process."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None

    @property
    def requested(self) -> bool:
        return self.received is not None

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handle)
        watch = ParentWatch.of_make_parent()
        if watch is not None:
            watch.start()

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
            # The later ones are ignored by the kernel from now on, not by this handler: Python sets
            # a signal with a handler back to its default action as the interpreter ends, so one
            # that came in those last moments, the stop done, killed the process (exit -2 for SIGINT).
            for later in STOP_SIGNALS:
                signal.signal(later, signal.SIG_IGN)


class ParentWatch:
    """Passes on to this process a stop signal that its parent, GNU make, received.

    ``kill -INT <pid of make>`` reaches make alone and make does not pass SIGINT or SIGHUP on
    (a terminal sends them to the whole foreground group, so make expects its children to have
    them already): it sets the signal back to its default action and waits for its children to
    end, which, without this, they never do. That change of disposition is visible in
    ``/proc/<make>/status`` (``SigCgt``, the caught signals), so a thread polls it and signals this
    process the same way. If make is gone altogether (killed outright), this process gets SIGTERM.
    """

    def __init__(self, parent_pid: int) -> None:
        self.parent_pid = parent_pid
        self.caught_at_start = caught_signals(parent_pid) & set(STOP_SIGNALS)

    @classmethod
    def of_make_parent(cls) -> ParentWatch | None:
        """A watch of this process's parent if the parent is make and /proc shows its signals."""
        parent = os.getppid()
        try:
            name = Path(f"/proc/{parent}/comm").read_text().strip()
        except OSError:
            return None
        # Only make: other parents (shells) change their signal handlers for reasons of their own.
        if name not in ("make", "gmake"):
            return None
        return cls(parent)

    def start(self) -> None:
        threading.Thread(target=self._watch, name="parent-watch", daemon=True).start()

    def lost_signal(self) -> signal.Signals | None:
        """The stop signal the parent has received since the watch began, or SIGTERM if the
        parent is gone; ``None`` while neither happened."""
        if os.getppid() != self.parent_pid:
            return signal.SIGTERM
        given_up = self.caught_at_start - caught_signals(self.parent_pid)
        return min(given_up) if given_up else None

    def _watch(self) -> None:
        while True:
            received = self.lost_signal()
            if received is not None:
                os.kill(os.getpid(), received)
                return
            time.sleep(PARENT_POLL_SECONDS)


def caught_signals(pid: int) -> set[signal.Signals]:
    """The signals ``pid`` has a handler for (empty when there is no such process or no /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return set()
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split()[1], 16)
            return {signum for signum in signal.Signals if mask & (1 << (signum - 1))}
    return set()
