"""Helpers shared by the end-to-end benches (``classstart``, ``jupyterhub``, ``pass_scale``, ``metrics_scale``).

Nothing here imports Django: the benches set up their environment (database URL, Redis URL,
settings) first and import Django afterwards. Every resource a bench takes — a PostgreSQL
database, a Redis database number, a temporary directory, child processes — is given back by
``Resources.close()``, which the benches call from ``finally`` (also on Ctrl-C and SIGTERM).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
POSTGRES_SERVER_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432")
REDIS_SERVER_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
# The same key the test suite claims its Redis database with (tests/settings.py), so a bench and
# a test run on one machine never take the same database number.
REDIS_CLAIM_KEY = "npu-lab-portal:test-run"


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def reference_loop_ms(iterations: int = 2_000_000, repeat: int = 3) -> float:
    """CPU ms of a fixed pure-Python loop, the fastest of ``repeat``: how fast this machine runs
    Python at the moment. On this project's virtual machines it moves with what other guests on
    the host do (this loop took 103 ms and, within the hour, 176-203 ms, with 1-5 % steal
    reported), and every figure of a bench moves with it: benches print it beside theirs."""
    best = math.inf
    for _ in range(repeat):
        began = time.process_time()
        total = 0
        for i in range(iterations):
            total += i * i
        best = min(best, time.process_time() - began)
    return best * 1000


def fmt_seconds(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f} s"


def run_id() -> str:
    return uuid.uuid4().hex[:10]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now (the usual bind-to-0 trick; racy but fine here)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raise_keyboard_interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the benches' ``finally`` blocks clean up."""

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


# --- Redis --------------------------------------------------------------------------------------


def redis_claim_database(server_url: str, owner: str, *, key: str = REDIS_CLAIM_KEY, ttl: int = 3 * 3600) -> str:
    """Claim the first Redis database 1..15 nobody claimed (SET NX with expiry) and return its URL.

    The claim expires, so a killed run frees its number after ``ttl`` seconds.
    """
    import redis

    for number in range(1, 16):
        url = f"{server_url.rstrip('/')}/{number}"
        if redis.Redis.from_url(url).set(key, owner, nx=True, ex=ttl):
            return url
    raise RuntimeError(f"every Redis database 1..15 at {server_url} is claimed ({key}); try again later")


def redis_release_database(url: str, owner: str, *, key: str = REDIS_CLAIM_KEY) -> bool:
    """Empty the database and drop the claim, but only if ``owner`` still holds it."""
    import redis

    client = redis.Redis.from_url(url)
    if client.get(key) != owner.encode():
        return False
    client.flushdb()
    return True


# --- PostgreSQL ---------------------------------------------------------------------------------


def postgres_create_database(server_url: str, name: str, *, connection_limit: int) -> str:
    """A new database owned by a new login role of the same name, limited to ``connection_limit`` connections.

    The limit is the role's (superusers are exempt from a database's limit): whatever the portal
    does with connections, it cannot use up the server's max_connections and break other work on
    the same PostgreSQL (a test run, say). Returns the database URL as that role.
    """
    import psycopg
    from psycopg import sql

    parts = urlsplit(server_url)
    # A password of its own, for a server whose pg_hba asks one over TCP (Debian's default).
    password = secrets.token_hex(16)
    with psycopg.connect(f"{server_url.rstrip('/')}/postgres", autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} CONNECTION LIMIT {}").format(
                sql.Identifier(name), sql.Literal(password), sql.Literal(int(connection_limit))
            )
        )
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(name)))
    return f"{parts.scheme}://{name}:{password}@{parts.hostname}:{parts.port or 5432}/{name}"


def postgres_drop_database(server_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server_url.rstrip('/')}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'DROP ROLE IF EXISTS "{name}"')


# --- child processes ----------------------------------------------------------------------------


class Service:
    """A child process in its own session (so the terminal's Ctrl-C reaches only the bench), logging to a file."""

    def __init__(
        self, name: str, command: list[str], *, env: dict[str, str], log_dir: Path, cwd: Path = ROOT, pass_fds: Sequence[int] = ()
    ) -> None:
        self.name = name
        self.command = command
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self) -> None:
        """Ask the main process to stop (celery and daphne then stop their own children in order)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()

    def wait_or_kill(self, deadline: float) -> None:
        try:
            self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        # Whatever is left in the group (pool children of a killed parent) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self._log.close()


def wait_until(predicate: Callable[[], object], *, timeout: float, what: str, services: Iterable[Service] = ()) -> object:
    """Poll ``predicate`` every 0.1 s; fail early with the log tail of a service that died."""
    services = list(services)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        for service in services:
            if not service.alive():
                raise RuntimeError(f"{service.name} exited with code {service.process.returncode}:\n{service.tail()}")
        time.sleep(0.1)
    tails = "\n".join(f"--- {s.name} ---\n{s.tail()}" for s in services)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")


@dataclass
class Resources:
    """Everything one bench run took; ``close()`` gives it all back, in reverse order, never raising."""

    temp_dir: Path | None = None
    services: list[Service] = field(default_factory=list)
    cleanups: list[tuple[str, Callable[[], object]]] = field(default_factory=list)
    keep_temp: bool = False

    def make_temp_dir(self, prefix: str) -> Path:
        self.temp_dir = Path(tempfile.mkdtemp(prefix=prefix))
        return self.temp_dir

    def start(
        self, name: str, command: list[str], *, env: dict[str, str], cwd: Path = ROOT, pass_fds: Sequence[int] = ()
    ) -> Service:
        """Start a service; ``pass_fds`` are inherited by it (a listening socket shared by several web processes)."""
        assert self.temp_dir is not None
        service = Service(name, command, env=env, log_dir=self.temp_dir, cwd=cwd, pass_fds=pass_fds)
        self.services.append(service)
        return service

    def on_close(self, what: str, action: Callable[[], object]) -> None:
        self.cleanups.append((what, action))

    def close(self) -> None:
        for service in reversed(self.services):
            service.terminate()
        deadline = time.monotonic() + 15
        for service in reversed(self.services):
            service.wait_or_kill(deadline)
        for what, action in reversed(self.cleanups):
            try:
                action()
            except Exception as exc:  # keep going: the rest must still be given back
                print(f"cleanup: could not {what}: {exc}", file=sys.stderr)
        if self.temp_dir is not None:
            if self.keep_temp:
                print(f"logs kept in {self.temp_dir}", file=sys.stderr)
            else:
                shutil.rmtree(self.temp_dir, ignore_errors=True)


# --- HTTP ---------------------------------------------------------------------------------------


@dataclass
class Response:
    status: int  # 0 when the request failed before a status line arrived
    body: bytes
    headers: dict[str, str]
    error: str = ""

    def json(self):
        return json.loads(self.body)


def http_request(
    method: str, url: str, *, headers: dict[str, str] | None = None, body: bytes | str | None = None, timeout: float = 60
) -> Response:
    """One request on a fresh connection (as each student's browser would open its own), stdlib only."""
    parts = urlsplit(url)
    if parts.hostname not in {"127.0.0.1", "localhost"}:
        raise ValueError(f"the benches only talk to 127.0.0.1, not {parts.hostname}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return Response(response.status, response.read(), {k.lower(): v for k, v in response.getheaders()})
    except (OSError, http.client.HTTPException) as exc:
        return Response(0, b"", {}, error=type(exc).__name__)
    finally:
        conn.close()


def cookies_of(response: Response) -> dict[str, str]:
    """Cookies set by a response (http.client folds repeated Set-Cookie headers with ', ')."""
    from http.cookies import SimpleCookie

    jar = SimpleCookie()
    raw = response.headers.get("set-cookie", "")
    for part in raw.split(", "):
        with contextlib.suppress(Exception):
            jar.load(part)
    return {name: morsel.value for name, morsel in jar.items()}


@dataclass
class Fired:
    key: str
    sent_at: float  # time.time() just before the request was sent
    done_at: float
    status: int
    error: str = ""
    retry_after: float | None = None


def fire_at_once(requests: list[tuple[str, Callable[[], Response]]], *, threads: int) -> list[Fired]:
    """Run every request from a pool of ``threads`` threads, all queued at once; time each one."""

    def one(item: tuple[str, Callable[[], Response]]) -> Fired:
        key, send = item
        sent_at = time.time()
        response = send()
        retry_after = response.headers.get("retry-after")
        return Fired(key, sent_at, time.time(), response.status, response.error, float(retry_after) if retry_after else None)

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="launch") as pool:
        return list(pool.map(one, requests))


def retry_until_accepted(
    fired: list[Fired],
    make_send: Callable[[str], Callable[[], Response]],
    *,
    should_retry: Callable[[Fired], bool],
    delay: Callable[[Fired], float],
    deadline: float,
    retried: list[Fired],
) -> None:
    """Send each request ``should_retry`` picks again ``delay`` seconds after its answer, as a user pressing again would.

    Runs until none is left to retry or ``deadline`` (time.time()) passes; appends every retry to ``retried``.
    """
    pending = [(f.done_at + delay(f), f.key) for f in fired if should_retry(f)]
    while pending:
        pending.sort()
        due, key = pending.pop(0)
        if due >= deadline:
            return
        time.sleep(max(0.0, due - time.time()))
        sent_at = time.time()
        response = make_send(key)()
        retry_after = response.headers.get("retry-after")
        result = Fired(key, sent_at, time.time(), response.status, response.error, float(retry_after) if retry_after else None)
        retried.append(result)
        if should_retry(result):
            pending.append((result.done_at + delay(result), key))


def status_counts(fired: Iterable[Fired]) -> str:
    counts = Counter(f.status if f.status else f"error:{f.error}" for f in fired)
    return ", ".join(f"{status}: {n}" for status, n in sorted(counts.items(), key=lambda kv: str(kv[0]))) or "none"


def new_token() -> str:
    return secrets.token_hex(32)


def write_json(path: str | None, figures: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(figures, indent=2, default=str))


# --- the portal inside the bench's own process ------------------------------------------------


def portal_in_process(res: Resources, name: str, rid: str, *, connection_limit: int = 10, **env: str) -> Path:
    """Django with ``portal.settings`` in this process, on its own migrated PostgreSQL database
    (``bench_<name>_<rid>``, dropped by ``res.close()``) and Redis database number (released).

    The environment is cleared of the portal's own settings (``DJANGO_``, ``LAB_``, ``CELERY_``,
    ``METRICS_``, ``API_``, ``LTI_``) so a developer's shell cannot change a bench; ``env`` adds
    the bench's. The simulator driver unless ``env`` names another. Returns the run's temp dir.
    """
    temp = res.make_temp_dir(f"npu-lab-bench-{name}-{rid}-")
    db_name = f"bench_{name}_{rid}"
    database_url = postgres_create_database(POSTGRES_SERVER_URL, db_name, connection_limit=connection_limit)
    res.on_close(f"drop database {db_name}", lambda: postgres_drop_database(POSTGRES_SERVER_URL, db_name))
    owner = f"bench-{name}-{rid}"
    redis_url = redis_claim_database(REDIS_SERVER_URL, owner)
    res.on_close(f"release {redis_url}", lambda: redis_release_database(redis_url, owner))
    for key in [k for k in os.environ if k.startswith(("DJANGO_", "LAB_", "CELERY_", "METRICS_", "API_", "LTI_"))]:
        del os.environ[key]
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": new_token(),
            "DEBUG": "0",
            "PORTAL_VAR_DIR": str(temp),
            "CHANNELS_PREFIX": f"bench-{rid}",
            "LAB_DRIVER": "labs.drivers.simulator.SimulatorDriver",
            "LOG_LEVEL": "WARNING",
            **env,
        }
    )
    import django
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    res.on_close("close this process's database connections", connections.close_all)
    call_command("migrate", interactive=False, verbosity=0)
    return temp


def bench_main(
    run: Callable[[object], dict],
    args,
    *,
    passed: Callable[[dict], bool] = lambda figures: True,
    interrupted: str = "interrupted; the database and the Redis number were given back",
) -> int:
    """A bench's ``main``: ``run(args)`` (which gives back what it took, Ctrl-C and SIGTERM too),
    then its figures as JSON to ``args.json`` when asked. 0 when ``passed(figures)``, else 1; 130
    when interrupted (after printing ``interrupted``)."""
    raise_keyboard_interrupt_on_sigterm()
    try:
        figures = run(args)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
    write_json(args.json, figures)
    return 0 if passed(figures) else 1


# -- CPU use of a run's processes (Linux /proc) ------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# A process's command line is taken as settled (read once, not every sample) a second after it started.
COMMAND_SETTLED_TICKS = CLOCK_TICKS


def proc_stat_fields(text: str) -> tuple[int, int]:
    """``(ppid, utime + stime in clock ticks)`` from the text of ``/proc/<pid>/stat``.

    The command name (field 2) is in parentheses and may itself hold spaces or parentheses, so
    the fields are counted from the last ``)``.
    """
    ppid, ticks, _ = proc_stat_start(text)
    return ppid, ticks


def proc_stat_start(text: str) -> tuple[int, int, int]:
    """``(ppid, utime + stime, start time)`` from ``/proc/<pid>/stat``, in clock ticks (the start
    time after the machine's boot): a pid and its start time name one process, as pids are reused."""
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15, starttime 22.
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[19])


def proc_read(path: str) -> bytes:
    """A small ``/proc`` file's bytes, read without Python's file objects (the meter reads hundreds
    a sample, on the cores it measures)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 17)
    finally:
        os.close(fd)


def machine_busy_ticks(text: str) -> tuple[int, int]:
    """``(busy, total)`` clock ticks of all cores from the first line of ``/proc/stat`` (idle and iowait are not busy)."""
    values = [int(v) for v in text.splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = values
    return user + nice + system + irq + softirq + steal, sum(values)


def machine_steal_ticks(text: str) -> int:
    """Clock ticks the hypervisor ran something else while this machine's cores wanted to run
    (``steal``, the eighth value of ``/proc/stat``'s first line): a virtual machine shared with
    busy neighbours gets less CPU, and every figure of the run is worse for it."""
    return int(text.splitlines()[0].split()[8])


def cpu_ticks(before: dict[str, dict[int, int]], after: dict[str, dict[int, int]]) -> dict[str, int]:
    """Per group, the clock ticks its processes used between two readings (a process that started
    in between counts from zero; one that ended in between counts as ``after`` last saw it)."""
    return {group: sum(max(0, t - before.get(group, {}).get(pid, 0)) for pid, t in now.items()) for group, now in after.items()}


def cpu_shares(before: dict[str, dict[int, int]], after: dict[str, dict[int, int]], seconds: float) -> dict[str, float]:
    """Per group, the CPU its processes used between two readings, in % of one core (a process that
    started in between counts from zero; one that ended in between is not seen)."""
    return {
        group: 100.0 * ticks / CLOCK_TICKS / seconds if seconds > 0 else math.nan
        for group, ticks in cpu_ticks(before, after).items()
    }


class CpuMeter:
    """CPU use of the run's processes (each with its children) and of the whole machine, between ``start`` and ``stop``.

    Linux only (``/proc``). ``groups`` maps a name to the root pids of that group; ``match`` maps
    a name to a test on a process's command line (PostgreSQL's backends name their database).
    Processes come and go during a run (a Celery prefork child opens a connection per task, so
    PostgreSQL starts a backend for it): with ``sample_period`` a thread reads the matched
    processes that often as well, and one that ended in between counts with its last reading (what
    it used after that reading, at most ``sample_period``, and one that lived less than that are
    not seen). ``shares``: % of one core per group; ``ms``: CPU milliseconds per group.
    """

    def __init__(
        self, groups: dict[str, list[int]], match: dict[str, Callable[[str], bool]], *, sample_period: float | None = None
    ) -> None:
        self.groups = groups
        self.match = match
        self.sample_period = sample_period
        self.before: tuple[float, dict[str, dict[int, int]], tuple[int, int, int]] | None = None
        self.seen: dict[str, dict[int, int]] = {}  # matched processes' latest readings, kept after they end
        self.shares: dict[str, float] = {}
        self.ms: dict[str, float] = {}
        self.stopping = threading.Event()
        self.sampler: threading.Thread | None = None
        self.commands: dict[int, tuple[int, str]] = {}  # pid -> (start time, command line) of settled processes

    def processes(self) -> dict[int, tuple[int, int, str]]:
        """Every process: pid -> (ppid, utime + stime in ticks, command line).

        Run every ``sample_period`` on the machine it measures, so it costs as little as it can: the
        files read with ``os`` calls, and a process's command line read once it is a second old
        (kept by pid and start time; until then read each time, as a new process may not have set
        it yet: a PostgreSQL backend names its database once it has logged in, a child execs).
        """
        table: dict[int, tuple[int, int, str]] = {}
        try:
            settled = float(proc_read("/proc/uptime").split()[0]) * CLOCK_TICKS - COMMAND_SETTLED_TICKS
        except (OSError, ValueError, IndexError):
            settled = -1.0
        commands: dict[int, tuple[int, str]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                ppid, ticks, started = proc_stat_start(proc_read(f"/proc/{name}/stat").decode(errors="replace"))
                known = self.commands.get(pid)
                if known is None or known[0] != started:
                    command = proc_read(f"/proc/{name}/cmdline").replace(b"\0", b" ").decode(errors="replace")
                    known = (started, command) if started <= settled else None
                else:
                    command = known[1]
            except (OSError, ValueError, IndexError):
                continue  # ended while being read
            if known is not None:
                commands[pid] = known
            table[pid] = (ppid, ticks, command)
        self.commands = commands  # the processes that ended are forgotten
        return table

    def read(self) -> tuple[float, dict[str, dict[int, int]], tuple[int, int, int]]:
        table = self.processes()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _, _) in table.items():
            children[ppid].append(pid)
        readings: dict[str, dict[int, int]] = {}
        for group, roots in self.groups.items():
            found, stack = {}, list(roots)
            while stack:
                pid = stack.pop()
                if pid in table and pid not in found:
                    found[pid] = table[pid][1]
                    stack.extend(children[pid])
            readings[group] = found
        self.note_matched(table, readings)
        stat = Path("/proc/stat").read_text()
        return time.monotonic(), readings, (*machine_busy_ticks(stat), machine_steal_ticks(stat))

    def note_matched(self, table: dict[int, tuple[int, int, str]], readings: dict[str, dict[int, int]] | None = None) -> None:
        for group, test in self.match.items():
            now = {pid: ticks for pid, (_, ticks, command) in table.items() if test(command)}
            seen = self.seen.setdefault(group, {})
            for pid, ticks in now.items():
                seen[pid] = max(ticks, seen.get(pid, 0))
            if readings is not None:
                readings[group] = now

    def _sample(self) -> None:
        assert self.sample_period is not None
        while not self.stopping.wait(self.sample_period):
            self.note_matched(self.processes())

    def start(self) -> None:
        self.before = self.read()
        self.seen = {group: dict(now) for group, now in self.before[1].items() if group in self.match}
        if self.sample_period:
            self.stopping.clear()
            self.sampler = threading.Thread(target=self._sample, name="cpu-meter", daemon=True)
            self.sampler.start()

    def stop(self) -> None:
        if self.before is None:
            return
        if self.sampler is not None:
            self.stopping.set()
            self.sampler.join(timeout=10)
            self.sampler = None
        began, before, (busy0, total0, steal0) = self.before
        ended, after, (busy1, total1, steal1) = self.read()
        after.update(self.seen)  # the matched ones with those that ended in between
        seconds = ended - began
        self.ms = {group: 1000.0 * ticks / CLOCK_TICKS for group, ticks in cpu_ticks(before, after).items()}
        self.shares = cpu_shares(before, after, seconds)
        processes = sum(self.shares.values())
        cores = os.cpu_count() or 1
        busy = (busy1 - busy0) / max(1, total1 - total0) * 100.0 * cores
        stolen = (steal1 - steal0) / max(1, total1 - total0) * 100.0 * cores
        self.shares["the whole machine"] = busy
        self.shares[STOLEN] = stolen
        self.shares["everything else (other work on the machine, this script)"] = busy - stolen - processes


STOLEN = "stolen by the hypervisor (counted in the whole machine; other guests ran)"
