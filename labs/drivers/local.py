"""A driver that runs each lab as a JupyterLab server process on this machine.

For development and single-machine installs: no container, no real NPU partition; the
instance's share is only described to the lab through the ``FLEXNPU_*`` environment
variables. Every server runs as the portal's own OS user, so a student's code can read what
that user can read; do not use it where students must be isolated from each other.

Each session gets, under ``state_dir``:

* ``<session_id>.json``: pid, process group, port, start marker, reference and the token
  (mode 0600; see ``labs.drivers.statefile``);
* ``sessions/<session_id>/``: ``work/`` (the server's root and working directory),
  ``runtime/`` (Jupyter's runtime files), ``config/`` (the lab's page config, see
  ``DISABLED_LAB_PLUGINS``) and ``jupyter.log``; removed by ``delete``.

The server runs in its own session and process group, gets its token through
``JUPYTER_TOKEN`` (never on the command line, where ``ps`` shows it) and an environment
stripped of the portal's secrets. Of the template's host limits it applies what one machine
can (``labs.drivers.limits``): the memory limit as an address-space cap on each of the lab's
processes and a niceness of ``LAB_NICENESS``; CPU limits, requests and scratch disk are not
enforced. Any process of this machine can poll or delete a session
another one started; only the starting process learns a server's exit code first-hand.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.domain.reasons import Reason
from labs.drivers import limits
from labs.drivers.base import ClusterDriver, DriverError, DriverRefused, LaunchSpec, NodePod, Observed, PollStatus
from labs.drivers.statefile import StateDir

STOP_GRACE_SECONDS = 5.0
# Labs run at a lower CPU priority than the portal's own processes.
LAB_NICENESS = 10
KILL_WAIT_SECONDS = 2.0
READY_TIMEOUT_SECONDS = 1.0
LOG_TAIL_BYTES = 4096
OUTPUT_MAX_CHARS = 300  # of the lab's last log line, in the reason it failed for

# Portal settings and credentials a lab must not inherit.
SECRET_ENV_NAMES = frozenset(
    {
        "SECRET_KEY",
        "DATABASE_URL",
        "TEST_DATABASE_URL",
        "REDIS_URL",
        "TEST_REDIS_URL",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
        "SENTRY_DSN",
        "SSH_AUTH_SOCK",
    }
)
SECRET_ENV_MARKERS = ("PASSWORD", "SECRET", "TOKEN", "CREDENTIAL", "API_KEY", "PRIVATE_KEY")
URL_WITH_CREDENTIALS = re.compile(r"^[a-z][a-z0-9+.-]*://[^/\s]*@", re.IGNORECASE)
WILDCARD_HOSTS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}

HAS_PROC = os.path.isdir("/proc/self")

# JupyterLab 4 asks each new user whether to fetch "official Jupyter news"; a lab opened from the
# portal should not. LabApp.news_url=None stops the fetching, not the question, so the plugin that
# asks is disabled in the session's own page config: JupyterLab reads labconfig/page_config.json
# in each directory of JUPYTER_CONFIG_PATH, and the portal user's Jupyter config stays untouched.
DISABLED_LAB_PLUGINS = ("@jupyterlab/apputils-extension:announcements",)


@dataclass
class _Child:
    """A server this process started; only its parent can learn its exit code."""

    parent_pid: int
    state: StateDir
    session_id: str
    ref: str
    process: subprocess.Popen[bytes]

    @property
    def ours(self) -> bool:
        # After a fork (Celery prefork) the entry is inherited but the server is not our child.
        return self.parent_pid == os.getpid()


# Module-level rather than per driver instance, so every instance in the process can reap.
_children: dict[int, _Child] = {}


class LocalDriver(ClusterDriver):
    """One JupyterLab server process per session, listening on ``host``."""

    option_names = frozenset({"state_dir", "host"})

    def __init__(self, *, state_dir: str, host: str = "127.0.0.1") -> None:
        self.state = StateDir(state_dir)
        self.host = host

    def create(self, spec: LaunchSpec) -> str:
        if spec.kind == "vllm":
            raise DriverRefused("vLLM templates need the kubernetes driver; the local driver runs JupyterLab only")
        if spec.kind != "jupyter":
            raise DriverRefused(f"The local driver runs JupyterLab only, not {spec.kind!r} labs.")
        with self.state.lock(spec.session_id) as sid:
            record = self.state.read(sid)
            if record is not None:
                return record["ref"]
            return self._start(sid, spec)

    def observe(self) -> dict[str, Observed]:
        self._reap_children()
        observed = {}
        for sid in self.state.session_ids():
            record = self.state.read(sid)
            if record is not None:
                observed[sid] = self._observed(sid, record)
        return observed

    def _observed(self, sid: str, record: dict[str, Any]) -> Observed:
        where = {"ref": record["ref"], "node": record.get("node", ""), "card_index": record.get("card")}
        if "exit_code" in record or not _server_alive(record):
            return Observed(sid, PollStatus.FAILED, reason=self._exit_reason(record), **where)
        if record.get("ready"):
            return Observed(sid, PollStatus.RUNNING, access_url=self._access_url(record), **where)
        if not self._answers(record):
            return Observed(sid, PollStatus.PENDING, reason=Reason.of("driver.jupyterlab_starting"), **where)
        # Once it has answered, liveness of the process is enough: a busy server stays RUNNING.
        # Not blocking: a delete may hold the lock while it stops the server.
        with contextlib.suppress(BlockingIOError):
            _update_record(self.state, sid, record["ref"], blocking=False, ready=True)
        return Observed(sid, PollStatus.RUNNING, access_url=self._access_url(record), **where)

    def pods_on(self, node: str) -> dict[str, NodePod]:
        """The labs recorded on ``node`` (by reference), running or not: a lab is this machine's
        process, and processes of other owners hold no FlexNPU instance the portal could see."""
        pods = {}
        for sid in self.state.session_ids():
            record = self.state.read(sid)
            if record is not None and record.get("node") == node:
                pods[record["ref"]] = NodePod(record["ref"], f"lab {sid}", portal=True)
        return pods

    def delete(self, session_id: str) -> None:
        with self.state.lock(session_id) as sid:
            record = self.state.read(sid)
            if record is not None:
                _stop(sid, record)
                self.state.remove(sid)
            shutil.rmtree(self._session_dir(sid), ignore_errors=True)

    def shutdown(self) -> None:
        """Stop every server recorded in ``state_dir``, whichever process started it."""
        for sid in self.state.session_ids():
            self.delete(sid)

    def _session_dir(self, sid: str) -> Path:
        return self.state.path / "sessions" / sid

    def _start(self, sid: str, spec: LaunchSpec) -> str:
        session_dir = self._session_dir(sid)
        work_dir = session_dir / "work"
        runtime_dir = session_dir / "runtime"
        config_dir = session_dir / "config"
        for directory in (session_dir, work_dir, runtime_dir, config_dir / "labconfig"):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        page_config = {"disabledExtensions": dict.fromkeys(DISABLED_LAB_PLUGINS, True)}
        (config_dir / "labconfig" / "page_config.json").write_text(json.dumps(page_config, indent=2))
        log_path = session_dir / "jupyter.log"
        port = _free_port(self.host)
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--ServerApp.ip={self.host}",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={work_dir}",
        ]
        if os.geteuid() == 0:
            # The portal itself runs as root (typical in a development container); the lab
            # would run as root anyway, Jupyter only refuses to without this flag.
            command.append("--allow-root")
        environment = _lab_environment(spec, runtime_dir, config_dir)
        # What one machine can enforce of the template's host limits (module docstring of
        # labs.drivers.limits): an address-space cap per process and a lower CPU priority.
        command = [
            sys.executable,
            # By path: the lab's working directory and environment know nothing of the portal.
            str(Path(limits.__file__)),
            f"--memory-mib={spec.host.memory_limit_mib}",
            f"--nice={LAB_NICENESS}",
            "--",
            *command,
        ]
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            process = subprocess.Popen(
                command,
                cwd=work_dir,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(session_dir, ignore_errors=True)
            raise DriverError(f"JupyterLab could not be started: {exc.strerror or exc}") from exc
        finally:
            os.close(log_fd)
        ref = str(uuid.uuid4())
        record = {
            "ref": ref,
            "pid": process.pid,
            "pgid": process.pid,  # start_new_session makes it the leader of its own group
            "start_marker": _start_marker(process.pid),
            "port": port,
            "host": self.host,
            "secret": spec.secret,
            "log": str(log_path),
            "started": time.time(),
            "node": spec.card.node,
            "card": spec.card.card_index,
        }
        try:
            self.state.write(sid, record)
        except BaseException:
            _stop(sid, record)
            raise
        _children[process.pid] = _Child(os.getpid(), self.state, sid, ref, process)
        return ref

    def _answers(self, record: dict[str, Any]) -> bool:
        host = WILDCARD_HOSTS.get(record["host"], record["host"])
        request = urllib.request.Request(
            f"http://{_url_host(host)}:{record['port']}/api/status",
            headers={"Authorization": f"token {record['secret']}"},
        )
        # No proxy: an HTTP(S)_PROXY in the portal's environment must not see the token.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=READY_TIMEOUT_SECONDS) as response:
                return response.status == 200
        except (OSError, http.client.HTTPException):
            return False

    def _access_url(self, record: dict[str, Any]) -> str:
        host = socket.gethostname() if record["host"] in WILDCARD_HOSTS else record["host"]
        token = urllib.parse.quote(record["secret"], safe="")
        return f"http://{_url_host(host)}:{record['port']}/lab?token={token}"

    def _exit_reason(self, record: dict[str, Any]) -> Reason:
        """Why the server is gone: its exit code or signal, with the last line it logged."""
        code = record.get("exit_code")
        child = _children.get(record["pid"])
        if code is None and child is not None and child.ours and child.ref == record["ref"]:
            code = child.process.returncode
        if code is None:
            reason = Reason.of("driver.jupyterlab_exited")
        elif code < 0:
            reason = Reason.of("driver.jupyterlab_killed", signal=_signal_name(-code))
        else:
            reason = Reason.of("driver.jupyterlab_exit_code", exit_code=code)
        last_line = _last_log_line(Path(record["log"]))
        if record["secret"]:
            last_line = last_line.replace(record["secret"], "<token>")
        return Reason.of("driver.with_output", reason=reason, output=last_line[:OUTPUT_MAX_CHARS]) if last_line else reason

    def _reap_children(self) -> None:
        """Collect exit codes of this process's finished servers, so none stays a zombie."""
        for pid, child in list(_children.items()):
            if not child.ours or child.process.poll() is None:
                continue
            with contextlib.suppress(BlockingIOError):
                # Not blocking: a delete may hold the lock while it stops the server.
                _update_record(child.state, child.session_id, child.ref, blocking=False, exit_code=child.process.returncode)
                _children.pop(pid, None)


def _update_record(state: StateDir, sid: str, ref: str, *, blocking: bool = True, **fields: Any) -> None:
    """Merge ``fields`` into the session's record if it still describes instance ``ref``."""
    with state.lock(sid, blocking=blocking):
        record = state.read(sid)
        if record is not None and record["ref"] == ref:
            state.write(sid, {**record, **fields})


def _lab_environment(spec: LaunchSpec, runtime_dir: Path, config_dir: Path) -> dict[str, str]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not (
            name.upper() in SECRET_ENV_NAMES
            or name.upper().endswith("_FILE")
            or any(marker in name.upper() for marker in SECRET_ENV_MARKERS)
            or URL_WITH_CREDENTIALS.match(value)
        )
    }
    environment.update(spec.instance_environment())
    environment["JUPYTER_TOKEN"] = spec.secret
    # Jupyter writes its connection files (which hold the token) there; delete removes them.
    environment["JUPYTER_RUNTIME_DIR"] = str(runtime_dir)
    # First in the search path, so it wins over the same keys elsewhere; other entries stay.
    environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(config_dir), environment.get("JUPYTER_CONFIG_PATH")]))
    return environment


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return sock.getsockname()[1]
    except OSError as exc:
        raise DriverError(f"No free port for JupyterLab on {host}: {exc.strerror or exc}") from exc


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_log_line(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# --- processes ----------------------------------------------------------------------------------
# With /proc, a process is identified by pid *and* start time, so a recycled pid is never
# mistaken for the server; zombies count as exited. Without /proc, os.kill(pid, 0) is the best guess.


def _proc_stat(pid: int) -> tuple[str, int, str] | None:
    """``(state, process group, start time)`` of ``pid``, or ``None`` when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields after it do not.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2]), fields[19].decode()


def _start_marker(pid: int) -> str | None:
    stat = _proc_stat(pid) if HAS_PROC else None
    return stat[2] if stat else None


def _is_live(pid: int, marker: str | None) -> bool:
    if HAS_PROC:
        stat = _proc_stat(pid)
        return stat is not None and stat[0] not in ("Z", "X") and (marker is None or stat[2] == marker)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: the pid was recycled
    return True


def _server_alive(record: dict[str, Any]) -> bool:
    child = _children.get(record["pid"])
    if child is not None and child.ours and child.ref == record["ref"]:
        return child.process.poll() is None
    return _is_live(record["pid"], record.get("start_marker"))


def _session_processes(sid: str, pgid: int) -> dict[int, str]:
    """Live processes of the session, pid -> start marker: the server's process group, and
    whatever carries ``LAB_SESSION_ID=<sid>`` in its environment (kernels run in sessions of
    their own, so killing the server's group does not reach them)."""
    if not HAS_PROC:
        return {}
    tag = f"LAB_SESSION_ID={sid}".encode()
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        if stat[1] == pgid:
            found[pid] = stat[2]
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if tag in environ.split(b"\0"):
            found[pid] = stat[2]
    return found


def _signal_all(record: dict[str, Any], processes: dict[int, str], signum: int, *, group: bool) -> None:
    # The group is signalled only while its leader is our server: a dead leader's pgid may be reused.
    if group and _server_alive(record):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record["pgid"], signum)
    for pid, marker in processes.items():
        if _is_live(pid, marker):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def _wait_stopped(record: dict[str, Any], processes: dict[int, str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        # _server_alive reaps the server when it is our child, so it does not linger as a zombie.
        if not _server_alive(record) and not any(_is_live(pid, marker) for pid, marker in processes.items()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _stop(sid: str, record: dict[str, Any]) -> None:
    """Stop the session's server and everything it started: SIGTERM first, SIGKILL after a grace period."""
    processes = _session_processes(sid, record["pgid"])
    # A live server gets SIGTERM alone, since it shuts its kernels down cleanly itself.
    _signal_all(record, {} if _server_alive(record) else processes, signal.SIGTERM, group=True)
    if not _wait_stopped(record, processes, STOP_GRACE_SECONDS):
        _signal_all(record, processes, signal.SIGKILL, group=True)
        _wait_stopped(record, processes, KILL_WAIT_SECONDS)
    child = _children.get(record["pid"])
    if child is not None and child.ref == record["ref"]:
        if child.ours:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=KILL_WAIT_SECONDS)
        _children.pop(record["pid"], None)
