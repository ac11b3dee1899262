"""``make chaos``: real processes, injected faults, then checks that nothing was lost, leaked or stuck.

    .venv/bin/python -m bench.chaos [--sessions 200] [--duration 120] [--agent-down 60] [--nodes 1]

Builds its own world and throws it away afterwards: a PostgreSQL database (unique name, dropped
at the end even on failure; credentials from ``TEST_DATABASE_URL`` like ``tests/settings.py``),
its own ``redis-server`` on a free port (so it can be killed with -9 and restarted), a temporary
``PORTAL_VAR_DIR`` (the simulator's state directory, beat's schedule file, every process's log).
It migrates, creates 1 or 2 nodes of 8 x 910B 64 GiB, a course whose quota fits them, the
students and a small template (5 %, 4 GiB), and starts a simulated node agent per node, two
Celery workers (prefork, concurrency 4, as deploy/ runs them) and Celery beat, all with the simulator driver.

The workload: ``--sessions`` launches (``session_launch`` from this process) spread over the
first ``--launch-window`` seconds, a third of them stopped (``session_stop``) at random times
over ``--duration`` seconds. Meanwhile these faults, one after another, each logged with its
time; after each the harness waits (bounded) until the sessions that were in progress when it
cleared have settled, and measures how long that took:

1. a driver fault window: the workers are restarted (one at a time) with 30 % create and delete
   failures and slow creates, then restarted again without (settings are read at process start);
2. ``kill -9`` of one worker (its whole process group), restarted after a few seconds;
3. ``kill -9`` of beat, restarted;
4. ``kill -9`` of the Redis server, restarted on the same port after a few seconds;
5. every backend of the database terminated (``pg_terminate_backend``);
6. ``inject_failure`` into a few running instances (the only failures the checks accept, with
   creates that failed ``LAB_CREATE_ATTEMPTS`` times in a row);
7. one node's agent killed for ``--agent-down`` seconds and started again on the same port
   (``--agent-fault pause`` stops it with SIGSTOP instead and continues it, keeping its state).

Then it waits for the system to settle (bounded) and checks, printing PASS/FAIL with numbers:
no session lost or stuck, no allocation leaked or doubled, no card over its limits, no instance
without a session (and none missing), no session failed whose instance was healthy, transient
create errors retried; and, as targets, each fault's settle time against two controller periods.
The exit code is 0 only if every check passes. A settle time is a speed figure, printed as
MET or MISSED against its target; it fails the run only with ``--strict-timing`` (a loaded
machine stretches it without anything being wrong).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/portal"
CARD_MIB = 64 * 1024
CARDS_PER_NODE = 8
TEMPLATE_CORE, TEMPLATE_MIB = 5, 4096
MAX_PER_CARD, MAX_PER_NODE = 16, 128
INJECTED_MESSAGE = "chaos: injected instance failure"
# Environment a child must not inherit from the caller's shell: the harness sets each itself.
FAULT_VARS = (
    "LAB_SIMULATOR_CREATE_FAILURE_RATE",
    "LAB_SIMULATOR_DELETE_FAILURE_RATE",
    "LAB_SIMULATOR_CREATE_DELAY_SECONDS",
    "LAB_DRIVER_OPTIONS",
    "CELERY_TASK_ALWAYS_EAGER",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200, help="sessions launched (default 200)")
    parser.add_argument("--students", type=int, default=None, help="students enrolled (default: --sessions)")
    parser.add_argument("--nodes", type=int, choices=[1, 2], default=1, help="nodes of 8 x 910B 64 GiB (default 1)")
    parser.add_argument("--duration", type=float, default=120.0, help="stops are spread over this many seconds (default 120)")
    parser.add_argument("--launch-window", type=float, default=20.0, help="launches are spread over this many seconds (20)")
    parser.add_argument("--stop-share", type=float, default=1 / 3, help="share of sessions stopped (default 1/3)")
    parser.add_argument("--agent-down", type=float, default=60.0, help="seconds one node agent stays down (default 60)")
    parser.add_argument(
        "--agent-fault",
        choices=["kill", "pause"],
        default="kill",
        help="kill: kill -9 the agent and start a new one on the same port (a simulated agent forgets its "
        "registrations); pause: SIGSTOP it and SIGCONT it after --agent-down (it keeps them). Default kill",
    )
    parser.add_argument("--fault-window", type=float, default=20.0, help="seconds of the driver fault window (default 20)")
    parser.add_argument("--failure-rate", type=float, default=0.3, help="create/delete failure rate in the window (0.3)")
    parser.add_argument("--create-delay", type=float, default=1.5, help="simulated create delay in the window, s (1.5)")
    parser.add_argument("--down", type=float, default=3.0, help="seconds a killed worker, beat or Redis stays down (3)")
    parser.add_argument("--burst", type=int, default=4, help="planned stops issued at once right before a fault (4)")
    parser.add_argument("--inject", type=int, default=3, help="running instances failed on purpose (default 3)")
    parser.add_argument("--controller-seconds", type=float, default=1.0, help="LAB_CONTROLLER_SECONDS (default 1)")
    parser.add_argument("--reconcile-seconds", type=float, default=5.0, help="RECONCILE_SECONDS (default 5)")
    parser.add_argument("--start-delay", type=float, default=1.0, help="LAB_SIMULATOR_DELAY_SECONDS (default 1)")
    parser.add_argument("--settle-bound", type=float, default=30.0, help="longest wait for stragglers after a fault, s (30)")
    parser.add_argument(
        "--strict-timing",
        action="store_true",
        help="fail the run when a fault settles later than two controller periods (default: report it as MISSED)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs) even when every check passes")
    args = parser.parse_args(argv)
    if args.sessions < 1:
        parser.error("--sessions must be at least 1")
    args.students = args.students or args.sessions
    if args.students < args.sessions:
        parser.error("--students must be at least --sessions (one open session per student)")
    if args.agent_down <= 0 or args.duration <= 0:
        parser.error("--agent-down and --duration must be positive")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 30)
    return args


# -- output ----------------------------------------------------------------------------------------

T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f} s] {message}", flush=True)


# -- infrastructure: ports, database, processes -----------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Database:
    """A PostgreSQL database of this run's own, reached with the credentials of ``TEST_DATABASE_URL``."""

    host: str
    port: int
    user: str
    password: str
    name: str

    @classmethod
    def from_url(cls, url: str, name: str) -> Database:
        parts = urlsplit(url)
        if parts.scheme not in ("postgres", "postgresql", "pgsql"):
            raise SystemExit(f"chaos needs PostgreSQL; TEST_DATABASE_URL is {parts.scheme}://...")
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432,
            user=unquote(parts.username or "postgres"),
            password=unquote(parts.password or ""),
            name=name,
        )

    @property
    def url(self) -> str:
        from urllib.parse import quote

        credentials = quote(self.user, safe="") + (":" + quote(self.password, safe="") if self.password else "")
        return f"postgres://{credentials}@{self.host}:{self.port}/{self.name}"

    def admin(self, *, attempts: int = 60):
        """An autocommit connection to the ``postgres`` database (retried: the server may be full)."""
        import psycopg

        for attempt in range(attempts):
            try:
                return psycopg.connect(
                    host=self.host,
                    port=self.port,
                    user=self.user,
                    password=self.password or None,
                    dbname="postgres",
                    autocommit=True,
                    connect_timeout=5,
                )
            except psycopg.OperationalError as exc:
                if attempt == attempts - 1:
                    raise
                if attempt % 10 == 0:
                    say(f"PostgreSQL refused a connection ({str(exc).strip().splitlines()[-1]}); retrying")
                time.sleep(1)
        raise AssertionError("unreachable")

    def create(self) -> None:
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')

    def terminate_backends(self, conn=None) -> int:
        sql = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
        if conn is not None:
            return conn.execute(sql, [self.name]).fetchone()[0]
        with self.admin() as admin:
            return admin.execute(sql, [self.name]).fetchone()[0]

    def drop(self) -> None:
        with self.admin(attempts=30) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Proc:
    """A child process in its own process group, its output appended to a log across restarts."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self.offset = 0
        # Set while the harness itself has it down; the supervisor restarts it otherwise.
        self.expected_down = True
        self.lock = threading.RLock()

    def start(self, **extra_env: str) -> None:
        with self.lock:
            self._start(extra_env)
            self.expected_down = False
            self.extra_env = extra_env

    def _start(self, extra_env: dict[str, str]) -> None:
        self.offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== chaos: start {self.name} {' '.join(f'{k}={v}' for k, v in extra_env.items())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env={**self.env, **extra_env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

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

    def kill9(self) -> None:
        self.expected_down = True
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 15.0) -> None:
        self.expected_down = True
        if self.alive():
            # SIGTERM to the main process only: a Celery worker then shuts down warmly (its pool
            # children finish their task); the group gets SIGKILL below.
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        if self.process is not None:
            # Prefork children of a worker stopped by SIGTERM leave with it; anything left goes now.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return True
        time.sleep(interval)
    return False


def redis_up(port: int) -> bool:
    import redis

    return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, socket_connect_timeout=0.5).ping())


def agent_up(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
        return response.status == 200


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class Fault:
    name: str
    started: float  # wall-clock (time.time()), comparable with the database's timestamps
    cleared: float = 0.0
    stragglers: list[str] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    slowest: str = ""
    settle_seconds: float | None = None  # None: not settled within the bound
    note: str = ""


@dataclass
class Workload:
    launched: dict[int, str] = field(default_factory=dict)  # student index -> session id
    stop_requested: dict[str, float] = field(default_factory=dict)  # session id -> when
    launch_errors: list[str] = field(default_factory=list)
    stop_errors: list[str] = field(default_factory=list)
    db_retries: int = 0


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.run_id = uuid.uuid4().hex[:10]
        self.dir = Path(tempfile.mkdtemp(prefix=f"npu-lab-chaos-{self.run_id}-"))
        self.logs = self.dir / "logs"
        self.logs.mkdir()
        base_url = os.environ.get("TEST_DATABASE_URL", DEFAULT_DATABASE_URL)
        self.db = Database.from_url(base_url, f"chaos_{self.run_id}")
        self.db_created = False
        self.redis_port = free_port()
        self.token = secrets.token_urlsafe(24)
        self.redis: Proc | None = None
        self.workers: list[Proc] = []
        self.beat: Proc | None = None
        self.agents: dict[str, Proc] = {}
        self.agent_urls: dict[str, str] = {}
        self.faults: list[Fault] = []
        self.workload = Workload()
        self.injected: set[str] = set()
        # Planned stops the main thread took over (a burst right before a fault); the workload skips them.
        self.claimed: set[int] = set()
        self.claim_lock = threading.Lock()
        self.pending_stops: list[int] = []
        self.results: list[tuple[str, bool, str]] = []
        self.timing: set[str] = set()
        self.infos: list[str] = []
        self.crashes: list[str] = []

    # -- environment ------------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in FAULT_VARS}
        env.update(
            DJANGO_SETTINGS_MODULE="portal.settings",
            SECRET_KEY=f"chaos-{self.run_id}-" + secrets.token_urlsafe(40),
            DATABASE_URL=self.db.url,
            REDIS_URL=f"redis://127.0.0.1:{self.redis_port}/0",
            CELERY_BROKER_URL=f"redis://127.0.0.1:{self.redis_port}/0",
            CHANNELS_PREFIX=f"chaos-{self.run_id}",
            PORTAL_VAR_DIR=str(self.dir / "var"),
            LAB_DRIVER="labs.drivers.simulator.SimulatorDriver",
            LAB_SIMULATOR_DELAY_SECONDS=str(self.args.start_delay),
            LAB_CONTROLLER_SECONDS=str(self.args.controller_seconds),
            RECONCILE_SECONDS=str(self.args.reconcile_seconds),
            LAB_AGENT_TOKEN=self.token,
            LAB_AGENT_TIMEOUT_SECONDS="2",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            LOG_LEVEL="INFO",
        )
        for name in ("LAB_AGENT_TOKEN_FILE", "SECRET_KEY_FILE", "DATABASE_URL_FILE"):
            env.pop(name, None)
        return env

    def fault_env(self) -> dict[str, str]:
        rate = str(self.args.failure_rate)
        return {
            "LAB_SIMULATOR_CREATE_FAILURE_RATE": rate,
            "LAB_SIMULATOR_DELETE_FAILURE_RATE": rate,
            "LAB_SIMULATOR_CREATE_DELAY_SECONDS": str(self.args.create_delay),
        }

    # -- setup ------------------------------------------------------------------------------------

    def setup(self) -> None:
        args = self.args
        say(f"run {self.run_id}: dir {self.dir}, database {self.db.name}, redis port {self.redis_port}, seed {args.seed}")
        self.redis_argv = [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(self.redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(self.dir),
        ]
        if not shutil.which("redis-server"):
            raise SystemExit("chaos needs redis-server on PATH (apt-get install redis-server)")
        env = self.base_env()
        # This process logs errors only (during the Redis outage every wake and page update warns); children log INFO.
        os.environ.update(env, LOG_LEVEL="ERROR")
        for name in FAULT_VARS:
            os.environ.pop(name, None)
        self.redis = Proc("redis", self.redis_argv, env, self.logs)
        self.redis.start()
        if not wait_until(lambda: redis_up(self.redis_port), 10):
            raise SystemExit(f"redis-server did not answer on port {self.redis_port}; see {self.redis.log_path}")
        self.db.create()
        self.db_created = True

        import django

        django.setup()
        from django.core.management import call_command

        started = time.monotonic()
        call_command("migrate", verbosity=0)
        say(f"migrated in {time.monotonic() - started:.1f} s")
        self.build_data()

        for index in range(args.nodes):
            name = f"n{index + 1}"
            port = free_port()
            self.agent_urls[name] = f"http://127.0.0.1:{port}"
            agent_argv = [sys.executable, "-m", "labs.agent", "--driver", "simulated", "--node", name, "--host", "127.0.0.1"]
            agent_argv += ["--port", str(port)]
            self.agents[name] = Proc(f"agent-{name}", agent_argv, {**env, "AGENT_TOKEN": self.token}, self.logs)
            self.agents[name].start()
        from labs.models import Node

        for name, url in self.agent_urls.items():
            Node.objects.filter(name=name).update(agent_url=url)
            if not wait_until(lambda url=url: agent_up(url), 20):
                raise SystemExit(f"agent {name} did not answer at {url}")

        worker_argv = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--loglevel", "INFO", "--pool", "prefork"]
        worker_argv += ["--concurrency", "4", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        for number in (1, 2):
            argv = worker_argv + ["--hostname", f"chaos-w{number}-{self.run_id}@%h"]
            self.workers.append(Proc(f"worker{number}", argv, env, self.logs))
        beat_argv = [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO"]
        beat_argv += ["--schedule", str(self.dir / "celerybeat-schedule")]
        self.beat = Proc("beat", beat_argv, env, self.logs)
        for worker in self.workers:
            worker.start()
        self.beat.start()
        for worker in self.workers:
            if not worker.wait_for_log(" ready.", 60):
                raise SystemExit(f"{worker.name} did not start; see {worker.log_path}")
        if not self.beat.wait_for_log("beat: Starting", 30):
            raise SystemExit(f"beat did not start; see {self.beat.log_path}")
        say(f"started redis, {len(self.agents)} agent(s), 2 workers (prefork x 4), beat")

    def build_data(self) -> None:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.hashers import make_password

        from labs.models import Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

        args = self.args
        for index in range(args.nodes):
            node = Node.objects.create(name=f"n{index + 1}")
            Card.objects.bulk_create(
                Card(node=node, index=i, die_id=f"{node.name}-die-{i}", chip_type="Ascend910B", memory_mib=CARD_MIB)
                for i in range(CARDS_PER_NODE)
            )
        institution = Institution.objects.create(name="Chaos University", slug="chaos")
        course = Course.objects.create(institution=institution, code="CHAOS", title="Faults", term="2026")
        cards = args.nodes * CARDS_PER_NODE
        CourseQuota.objects.create(
            course=course,
            core_percent=100 * cards,
            memory_mib=CARD_MIB * cards,
            instance_count=MAX_PER_NODE * args.nodes,
            sessions_per_student=1,
            max_session_minutes=180,
        )
        template = LabTemplate.objects.create(
            institution=institution,
            name="small",
            slug="small",
            image="jupyter/base:latest",
            core_percent=TEMPLATE_CORE,
            memory_mib=TEMPLATE_MIB,
        )
        course.templates.add(template)
        User = get_user_model()
        password = make_password(None)
        users = User.objects.bulk_create(User(username=f"chaos{i:04d}", password=password) for i in range(args.students))
        Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in users)
        self.course_id, self.template_id = course.pk, template.pk
        self.student_ids = [u.pk for u in users]
        say(
            f"data: {args.nodes} node(s) x {CARDS_PER_NODE} x 910B 64 GiB ({MAX_PER_NODE * args.nodes} small slots), "
            f"course quota {100 * cards} % / {cards * 64} GiB / {MAX_PER_NODE * args.nodes} instances, "
            f"{args.students} students, template {TEMPLATE_CORE} % / {TEMPLATE_MIB // 1024} GiB"
        )

    # -- workload ---------------------------------------------------------------------------------

    def plan(self) -> list[tuple[float, str, int]]:
        args = self.args
        events = []
        launch_at = {}
        for i in range(args.sessions):
            launch_at[i] = args.launch_window * i / max(1, args.sessions - 1)
            events.append((launch_at[i], "launch", i))
        stopped = self.rng.sample(range(args.sessions), round(args.sessions * args.stop_share))
        for i in stopped:
            earliest = launch_at[i] + 2.0
            events.append((self.rng.uniform(earliest, max(earliest, args.duration)), "stop", i))
        return sorted(events)

    def run_workload(self, events: list[tuple[float, str, int]], started: float, done: threading.Event) -> None:
        from django.contrib.auth import get_user_model
        from django.db import connection

        from labs.models import Course, LabSession, LabTemplate
        from labs.services.sessions import LaunchRefused, session_launch

        User = get_user_model()
        course = self.retry(lambda: Course.objects.get(pk=self.course_id))
        template = self.retry(lambda: LabTemplate.objects.get(pk=self.template_id))
        try:
            for at, kind, i in events:
                delay = started + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if kind == "launch":
                    student = self.retry(lambda i=i: User.objects.get(pk=self.student_ids[i]))

                    def launch(student=student):
                        try:
                            return str(session_launch(student=student, course=course, template=template).pk)
                        except LaunchRefused:
                            # A launch whose commit was cut off by a terminated backend and retried.
                            existing = LabSession.objects.filter(student=student).order_by("-created_at").first()
                            if existing is None:
                                raise
                            return str(existing.pk)

                    try:
                        self.workload.launched[i] = self.retry(launch)
                    except Exception as exc:
                        self.workload.launch_errors.append(f"student {i}: {exc!r}")
                else:
                    with self.claim_lock:
                        if i in self.claimed:
                            continue
                        self.claimed.add(i)
                    self.stop(i)
        finally:
            with contextlib.suppress(Exception):
                connection.close()
            done.set()

    def stop(self, i: int) -> None:
        from labs.domain.reasons import Reason
        from labs.services.sessions import session_stop

        session_id = self.workload.launched.get(i)
        if session_id is None or session_id in self.injected:
            return
        self.workload.stop_requested[session_id] = time.time()
        try:
            self.retry(lambda: session_stop(session_id=session_id, reason=Reason.of("session.stopped_by", who="chaos")))
        except Exception as exc:
            self.workload.stop_errors.append(f"{session_id}: {exc!r}")

    def burst(self) -> None:
        """Stop a few sessions the plan would stop later, at once, so the next fault meets work in flight."""
        with self.claim_lock:
            candidates = [i for i in self.pending_stops if i not in self.claimed and i in self.workload.launched]
            taken = self.rng.sample(candidates, min(self.args.burst, len(candidates)))
            self.claimed.update(taken)
        for i in taken:
            self.stop(i)
        if taken:
            say(f"  burst: stopped {len(taken)} sessions just before the fault")

    def retry(self, fn, attempts: int = 30):
        """Run ``fn``; on a lost database connection (a terminated backend) reconnect and run it again."""
        from django.db import InterfaceError, OperationalError, connection

        for attempt in range(attempts):
            try:
                return fn()
            except (OperationalError, InterfaceError):
                if attempt == attempts - 1:
                    raise
                self.workload.db_retries += 1
                with contextlib.suppress(Exception):
                    connection.close()
                time.sleep(0.2)
        raise AssertionError("unreachable")

    # -- faults -----------------------------------------------------------------------------------

    def in_progress(self) -> list[str]:
        from labs.domain.states import SessionState
        from labs.models import LabSession

        states = [SessionState.ADMITTED, SessionState.STARTING, SessionState.STOPPING]
        return self.retry(lambda: [str(pk) for pk in LabSession.objects.filter(state__in=states).values_list("pk", flat=True)])

    def queued_fitting(self) -> list[str]:
        """The queued sessions the allocation pass could place now (oldest first, as it goes)."""
        from labs.domain.states import SessionState
        from labs.models import LabSession

        fitting, _ = self.retry(self.queued_with_room)
        queued = LabSession.objects.filter(state=SessionState.QUEUED).order_by("created_at", "id")
        return self.retry(lambda: [str(pk) for pk in queued.values_list("pk", flat=True)[:fitting]]) if fitting else []

    def begin(self, name: str) -> Fault:
        fault = Fault(name, time.time())
        self.faults.append(fault)
        say(f"FAULT {len(self.faults)}: {name}")
        return fault

    def cleared(self, fault: Fault, note: str = "") -> None:
        fault.cleared = time.time()
        fault.note = note
        fault.stragglers = self.in_progress() + self.queued_fitting()
        say(
            f"  cleared after {fault.cleared - fault.started:.1f} s{' (' + note + ')' if note else ''}; "
            f"{len(fault.stragglers)} session(s) in progress or queued with room"
        )
        self.wait_settled(fault)

    def wait_settled(self, fault: Fault) -> None:
        """Wait (bounded) until the fault's stragglers have settled, watching at least one reconciler period.

        Stragglers are the sessions in progress (admitted, starting, stopping) when the fault
        cleared, the queued ones that would have fitted then, and the fault's after-effects:
        sessions that begin to stop after it cleared without the workload asking (failed by the
        controller or the reconciler).
        """
        from django.db.models import Q

        from labs.domain.states import SessionState
        from labs.models import LabSession

        states = [SessionState.QUEUED, SessionState.ADMITTED, SessionState.STARTING, SessionState.STOPPING]
        cleared = datetime.fromtimestamp(fault.cleared, tz=UTC)
        tracked = set(fault.stragglers)
        watch_until = time.monotonic() + self.args.reconcile_seconds + 1
        deadline = time.monotonic() + self.args.settle_bound
        pending = tracked
        while time.monotonic() < deadline:
            effects = self.retry(
                lambda: {
                    str(pk)
                    for pk in LabSession.objects.filter(Q(stopping_at__gte=cleared) | Q(ended_at__gte=cleared))
                    .exclude(state=SessionState.QUEUED)
                    .values_list("pk", flat=True)
                }
            )
            tracked |= effects - set(self.workload.stop_requested)
            pending = self.retry(
                lambda tracked=tracked: {
                    str(pk) for pk in LabSession.objects.filter(pk__in=tracked, state__in=states).values_list("pk", flat=True)
                }
            )
            if not pending and time.monotonic() >= watch_until:
                break
            time.sleep(0.25)
        fault.effects = sorted(tracked - set(fault.stragglers))
        fault.settle_seconds = None if pending else self.settle_time(fault, tracked)
        if pending:
            say(f"  NOT settled within {self.args.settle_bound:.0f} s: {len(pending)} still queued or in progress")
        else:
            say(
                f"  settled {fault.settle_seconds:.2f} s after it cleared ({len(fault.stragglers)} in progress or fitting, "
                f"{len(fault.effects)} after-effects)"
            )
        time.sleep(1.0)

    def settle_time(self, fault: Fault, tracked: set[str]) -> float:
        """When the last tracked session reached running or ended, after the fault cleared (database timestamps)."""
        from labs.models import LabSession

        latest = 0.0
        rows = self.retry(
            lambda: list(
                LabSession.objects.filter(pk__in=tracked).values_list(
                    "pk", "running_at", "ended_at", "state", "reason_code", "create_attempts"
                )
            )
        )
        for pk, running_at, ended_at, state, code, attempts in rows:
            times = [t.timestamp() for t in (running_at, ended_at) if t is not None and t.timestamp() >= fault.cleared]
            if times and min(times) - fault.cleared >= latest:
                latest = min(times) - fault.cleared
                fault.slowest = f"{pk}: {state}, reason {code or '-'}, {attempts} failed creates"
        return latest

    def restart_workers(self, note: str, **extra_env: str) -> None:
        """Restart the workers one at a time (warm shutdown), so one keeps serving."""
        for worker in self.workers:
            started = time.monotonic()
            worker.stop(timeout=60)
            stopped = time.monotonic()
            worker.start(**extra_env)
            if not worker.wait_for_log(" ready.", 60):
                say(f"  {worker.name} did not come back; see {worker.log_path}")
            say(f"  {worker.name}: warm shutdown {stopped - started:.1f} s, start {time.monotonic() - stopped:.1f} s")
        say(f"  workers restarted {note}")

    def fault_driver_window(self) -> None:
        args = self.args
        fault = self.begin(
            f"driver faults: {args.failure_rate:.0%} of creates and deletes fail, creates take {args.create_delay:g} s, "
            f"for {args.fault_window:g} s"
        )
        self.restart_workers("with the faulty driver", **self.fault_env())
        time.sleep(max(0.0, fault.started + args.fault_window - time.time()))
        self.restart_workers("without faults")
        self.cleared(fault, "both workers back on a healthy driver")

    def fault_kill_worker(self) -> None:
        worker = self.workers[0]
        self.burst()
        fault = self.begin(f"kill -9 {worker.name} (process group {worker.pid})")
        worker.kill9()
        time.sleep(self.args.down)
        worker.start()
        ok = worker.wait_for_log(" ready.", 60)
        self.cleared(fault, f"{worker.name} restarted, ready" if ok else f"{worker.name} did NOT report ready")

    def fault_kill_beat(self) -> None:
        self.burst()
        fault = self.begin(f"kill -9 beat (pid {self.beat.pid})")
        self.beat.kill9()
        time.sleep(self.args.down)
        self.beat.start()
        ok = self.beat.wait_for_log("beat: Starting", 30)
        self.cleared(fault, "beat restarted" if ok else "beat did NOT start")

    def fault_kill_redis(self) -> None:
        self.burst()
        fault = self.begin(f"kill -9 redis-server (pid {self.redis.pid}, port {self.redis_port})")
        self.redis.kill9()
        time.sleep(max(self.args.down, 3.0))
        self.redis.start()
        ok = wait_until(lambda: redis_up(self.redis_port), 15)
        self.cleared(fault, "redis answers again on the same port (empty)" if ok else "redis did NOT come back")

    def fault_terminate_backends(self) -> None:
        self.burst()
        fault = self.begin(f"pg_terminate_backend of every connection to {self.db.name}")
        count = self.db.terminate_backends()
        self.cleared(fault, f"{count} backends terminated")

    def fault_inject(self) -> None:
        from django.conf import settings

        from labs.domain.states import SessionState
        from labs.drivers.simulator import SimulatorDriver
        from labs.models import LabSession

        running = self.retry(
            lambda: [str(pk) for pk in LabSession.objects.filter(state=SessionState.RUNNING).values_list("pk", flat=True)]
        )
        # Never a session the workload stops (or will stop): its end would be a stop, not the failure.
        planned = self.planned_stops | set(self.workload.stop_requested)
        candidates = sorted(sid for sid in running if sid not in planned)
        chosen = self.rng.sample(candidates, min(self.args.inject, len(candidates)))
        fault = self.begin(f"inject_failure into {len(chosen)} running instance(s)")
        driver = SimulatorDriver(state_dir=settings.LAB_DRIVER["OPTIONS"]["state_dir"])
        for session_id in chosen:
            self.injected.add(session_id)
            driver.inject_failure(session_id, INJECTED_MESSAGE)
        self.cleared(fault, "the instances report FAILED")

    def fault_agent_down(self) -> None:
        name = next(iter(self.agents))
        agent = self.agents[name]
        self.burst()
        if self.args.agent_fault == "pause":
            fault = self.begin(f"SIGSTOP agent of {name} (pid {agent.pid}) for {self.args.agent_down:g} s, then SIGCONT")
            os.killpg(agent.pid, signal.SIGSTOP)
            time.sleep(self.args.agent_down)
            os.killpg(agent.pid, signal.SIGCONT)
        else:
            fault = self.begin(f"kill -9 agent of {name} (pid {agent.pid}) for {self.args.agent_down:g} s")
            agent.kill9()
            time.sleep(self.args.agent_down)
            agent.start()
        ok = wait_until(lambda: agent_up(self.agent_urls[name]), 20)
        self.cleared(fault, f"agent answers again at {self.agent_urls[name]}" if ok else "agent did NOT come back")

    # -- the whole run ----------------------------------------------------------------------------

    def supervise(self, done: threading.Event) -> None:
        """Restart a worker or beat that exited by itself, as systemd or Kubernetes would; each one is a failed check."""
        while not done.wait(0.5):
            for proc in [*self.workers, self.beat]:
                with proc.lock:
                    if proc.expected_down or proc.alive():
                        continue
                    code = proc.process.returncode
                    last = [line for line in proc.log_since_start().splitlines() if "CRITICAL" in line or "Unrecoverable" in line]
                    why = last[-1].strip()[:200] if last else "no CRITICAL line in its log"
                    self.crashes.append(f"{proc.name} exited by itself (code {code}): {why}")
                    say(f"SUPERVISOR: {proc.name} exited by itself (code {code}): {why}; restarting it")
                    proc.start(**getattr(proc, "extra_env", {}))

    def run(self) -> int:
        self.setup()
        supervisor_done = threading.Event()
        threading.Thread(target=self.supervise, args=(supervisor_done,), name="supervisor", daemon=True).start()
        try:
            return self._run()
        finally:
            supervisor_done.set()

    def _run(self) -> int:
        events = self.plan()
        self.planned_stops: set[str] = set()
        stop_students = {i for _, kind, i in events if kind == "stop"}
        # Bursts take planned stops not yet made, at random, so stops go on between the faults.
        self.pending_stops = [i for _, kind, i in events if kind == "stop"]
        done = threading.Event()
        started = time.monotonic()
        say(
            f"workload: {self.args.sessions} launches over {self.args.launch_window:g} s, "
            f"{len(stop_students)} stops over {self.args.duration:g} s"
        )
        thread = threading.Thread(target=self.run_workload, args=(events, started, done), name="workload", daemon=True)
        thread.start()
        time.sleep(2.0)
        self.fault_driver_window()
        self.fault_kill_worker()
        self.fault_kill_beat()
        self.fault_kill_redis()
        self.fault_terminate_backends()
        self.planned_stops = {self.workload.launched[i] for i in stop_students if i in self.workload.launched}
        self.fault_inject()
        self.fault_agent_down()
        remaining = started + self.args.duration - time.monotonic()
        if not done.is_set():
            say(f"waiting up to {max(0.0, remaining) + 30:.0f} s for the workload's last stops")
        done.wait(max(0.0, remaining) + 30)
        last_cleared = max(f.cleared for f in self.faults)
        self.final_settle(last_cleared)
        self.check()
        return self.report()

    def final_settle(self, since: float) -> None:
        args = self.args
        bound = 3 * args.controller_seconds + args.start_delay + args.reconcile_seconds + 10
        say(f"waiting for the system to settle (bound {bound:g} s: 3 x controller period + start delay + reconcile period + 10)")
        started = time.monotonic()
        settled = wait_until(lambda: not self.in_progress() and not self.queued_with_room()[0], bound, interval=0.25)
        elapsed = time.monotonic() - started
        self.settled_after = time.time() - since
        self.result(
            "system settled after the last fault",
            settled,
            f"{elapsed:.1f} s of waiting, {self.settled_after:.1f} s after the last fault cleared (bound {bound:g} s)"
            if settled
            else f"still {len(self.in_progress())} in progress / {self.queued_with_room()[0]} queued with room after {bound:g} s",
        )

    def queued_with_room(self) -> tuple[int, int]:
        """(queued sessions that would fit, free small slots on healthy cards) — queued with room is a stuck queue.

        Every node counts, available or not: once the faults have cleared every node is back, and a
        queue that waits for the reconciler to notice that is waiting on a fault.
        """
        from labs.domain.states import SessionState
        from labs.models import Allocation, Card, LabSession

        queued = LabSession.objects.filter(state=SessionState.QUEUED).count()
        if not queued:
            return 0, 0
        use = collections.defaultdict(lambda: [0, 0, 0])
        for card_id, core, mib in Allocation.objects.filter(released_at__isnull=True).values_list(
            "card_id", "core_percent", "memory_mib"
        ):
            use[card_id][0] += core
            use[card_id][1] += mib
            use[card_id][2] += 1
        room = 0
        per_node = collections.Counter()
        cards = list(Card.objects.filter(healthy=True).values_list("pk", "node_id", "memory_mib"))
        for card_id, node_id, _ in cards:
            per_node[node_id] += use[card_id][2]
        for card_id, node_id, mib in cards:
            core, used, count = use[card_id]
            fit = min((100 - core) // TEMPLATE_CORE, (mib - used) // TEMPLATE_MIB, MAX_PER_CARD - count)
            room += max(0, min(fit, MAX_PER_NODE - per_node[node_id]))
        return min(queued, room), room

    # -- checks -----------------------------------------------------------------------------------

    def result(self, name: str, passed: bool, detail: str, *, timing: bool = False) -> None:
        """One check; ``timing``: a speed target (reported, gating only with ``--strict-timing``)."""
        self.results.append((name, passed, detail))
        if timing:
            self.timing.add(name)

    def check(self) -> None:
        from django.conf import settings
        from django.db.models import Count

        from labs.domain.states import SessionState
        from labs.drivers.simulator import SimulatorDriver
        from labs.models import Allocation, Card, LabSession

        S = SessionState
        sessions = self.retry(
            lambda: {
                str(row["pk"]): row
                for row in LabSession.objects.values(
                    "pk",
                    "state",
                    "reason_code",
                    "reason_params",
                    "ended_at",
                    "running_at",
                    "create_attempts",
                    "driver_ref",
                    "end_state",
                )
            }
        )
        by_state = collections.Counter(row["state"] for row in sessions.values())
        say("final states: " + ", ".join(f"{state} {by_state[state]}" for state in S if by_state[state]))

        # 1. no session lost or stuck
        launched = set(self.workload.launched.values())
        missing = launched - set(sessions)
        stuck = [sid for sid, r in sessions.items() if r["state"] in (S.ADMITTED, S.STARTING, S.STOPPING)]
        queued_silent = [sid for sid, r in sessions.items() if r["state"] == S.QUEUED and not r["reason_code"]]
        queued_room, room = self.queued_with_room()
        closed_no_end = [sid for sid, r in sessions.items() if r["state"] in (S.STOPPED, S.FAILED) and r["ended_at"] is None]
        stop_ignored = [
            sid for sid in self.workload.stop_requested if sessions.get(sid, {}).get("state") not in (S.STOPPED, S.FAILED)
        ]
        self.result(
            "no session lost or stuck",
            not (
                missing or stuck or queued_silent or queued_room or closed_no_end or stop_ignored or self.workload.launch_errors
            ),
            f"{len(launched)}/{self.args.sessions} launched ({len(self.workload.launch_errors)} launch errors), "
            f"{len(missing)} missing, {len(stuck)} in admitted/starting/stopping, {by_state[S.QUEUED]} queued "
            f"({len(queued_silent)} without a reason, {queued_room} although {room} slot(s) are free), "
            f"{len(closed_no_end)} closed without ended_at, {len(stop_ignored)} of {len(self.workload.stop_requested)} "
            f"stops not honoured",
        )

        self.latency_info(sessions)

        # 2. no allocation leaked or doubled
        unreleased = collections.Counter(
            str(sid) for sid in Allocation.objects.filter(released_at__isnull=True).values_list("session_id", flat=True)
        )
        leaked = [sid for sid, r in sessions.items() if r["state"] in (S.STOPPED, S.FAILED, S.QUEUED) and unreleased[sid]]
        running = [sid for sid, r in sessions.items() if r["state"] == S.RUNNING]
        not_one = [sid for sid in running if unreleased[sid] != 1]
        doubled = [sid for sid, n in unreleased.items() if n > 1]
        doubled += [
            str(row["session_id"])
            for row in Allocation.objects.filter(released_at__isnull=True)
            .values("session_id")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
        ]
        self.result(
            "no allocation leaked or doubled",
            not (leaked or not_one or doubled),
            f"{sum(unreleased.values())} unreleased allocations; {len(leaked)} held by ended/queued sessions, "
            f"{len(not_one)} of {len(running)} running sessions without exactly one, {len(set(doubled))} sessions with two",
        )

        # 3. no card over its limits
        cards = {pk: (node_id, mib) for pk, node_id, mib in Card.objects.values_list("pk", "node_id", "memory_mib")}
        use = collections.defaultdict(lambda: [0, 0, 0])
        for card_id, core, mib in Allocation.objects.filter(released_at__isnull=True).values_list(
            "card_id", "core_percent", "memory_mib"
        ):
            use[card_id][0] += core
            use[card_id][1] += mib
            use[card_id][2] += 1
        over = [pk for pk, (core, mib, n) in use.items() if core > 100 or mib > cards[pk][1] or n > MAX_PER_CARD]
        per_node = collections.Counter()
        for pk, (_, _, n) in use.items():
            per_node[cards[pk][0]] += n
        nodes_over = [node for node, n in per_node.items() if n > MAX_PER_NODE]
        worst = max(use.values(), default=[0, 0, 0], key=lambda u: u[0])
        self.result(
            "no card over its limits",
            not (over or nodes_over),
            f"{len(over)} cards over (max core {worst[0]} %, max memory "
            f"{max((u[1] for u in use.values()), default=0) // 1024} GiB of 64, max instances "
            f"{max((u[2] for u in use.values()), default=0)} of {MAX_PER_CARD}), {len(nodes_over)} nodes over "
            f"(max {max(per_node.values(), default=0)} of {MAX_PER_NODE})",
        )

        # 4. no instance without a session, no running session without an instance
        driver = SimulatorDriver(state_dir=settings.LAB_DRIVER["OPTIONS"]["state_dir"])
        instances = driver.observe()
        running_set = set(running)
        orphans = sorted(set(instances) - running_set)
        without = sorted(running_set - set(instances))
        wrong_ref = [sid for sid in running_set & set(instances) if instances[sid].ref != sessions[sid]["driver_ref"]]
        orphan_states = collections.Counter(sessions.get(sid, {}).get("state", "unknown") for sid in orphans)
        self.result(
            "no instance without a session",
            not (orphans or without or wrong_ref),
            f"{len(instances)} simulator instances for {len(running_set)} running sessions: {len(orphans)} without a running "
            f"session {dict(orphan_states) or ''}, {len(without)} running sessions without one, "
            f"{len(wrong_ref)} with another ref",
        )
        self.agent_info(sessions, running_set)

        # 5. no session failed whose instance was healthy
        attempts = settings.LAB_CREATE_ATTEMPTS
        failed = {sid: r for sid, r in sessions.items() if r["state"] == S.FAILED}
        injected_failed = [sid for sid in self.injected if sid in failed]
        exhausted = [
            sid
            for sid, r in failed.items()
            if sid not in self.injected and r["reason_code"] == "session.create_failed" and r["create_attempts"] >= attempts - 1
        ]
        healthy = {sid: r for sid, r in failed.items() if sid not in self.injected and sid not in exhausted}
        codes = collections.Counter(r["reason_code"] for r in healthy.values())
        self.result(
            "no session failed whose instance was healthy",
            not healthy,
            f"{len(failed)} failed: {len(injected_failed)} injected (inject_failure), {len(exhausted)} after {attempts} failed "
            f"creates in a row, {len(healthy)} with a healthy instance {dict(codes) or ''}",
        )
        not_failed = [sid for sid in self.injected if sid not in failed]
        self.result(
            "injected failures detected",
            not not_failed,
            f"{len(injected_failed)} of {len(self.injected)} injected instances ended their session as failed",
        )
        if exhausted:
            self.infos.append(
                f"{len(exhausted)} session(s) failed after {attempts} creates in a row failed (a {self.args.failure_rate:.0%} "
                f"failure rate gives {self.args.failure_rate**attempts:.2%} per session; deliberate)"
            )

        # 6. transient create errors retried
        retried = [r for r in sessions.values() if r["create_attempts"] > 0]
        recovered = [r for r in retried if r["running_at"] is not None]
        unresolved = [
            r
            for r in retried
            if r["running_at"] is None and str(r["pk"]) not in self.workload.stop_requested and str(r["pk"]) not in exhausted
        ]
        self.result(
            "transient create errors retried",
            bool(recovered) and not unresolved,
            f"{len(retried)} sessions saw a failed create; {len(recovered)} reached running after "
            f"{statistics.mean([r['create_attempts'] for r in recovered]) if recovered else 0:.1f} failed tries on average, "
            f"{len(retried) - len(recovered) - len(unresolved)} stopped or failed for good, {len(unresolved)} unresolved",
        )

        # 7. processes that died without being killed (restarted by the harness's supervisor)
        self.result(
            "no worker or beat died by itself",
            not self.crashes,
            "none" if not self.crashes else f"{len(self.crashes)}: " + "; ".join(self.crashes),
        )

        # 8. settle time per fault: a target (see the module docstring); never settling is a failure
        target = 2 * self.args.controller_seconds
        for number, fault in enumerate(self.faults, 1):
            settled = fault.settle_seconds
            self.result(
                f"fault {number} settled within 2 controller periods ({target:g} s): {fault.name}",
                settled is not None and settled <= target,
                (f"{settled:.2f} s" if settled is not None else f"not settled within {self.args.settle_bound:g} s")
                + f" for {len(fault.stragglers)} in progress/fitting + {len(fault.effects)} after-effects; "
                f"fault lasted {fault.cleared - fault.started:.1f} s",
                timing=settled is not None,
            )

    def latency_info(self, sessions: dict) -> None:
        """How long stops took (request -> stopped), overall and while the driver fault window was open."""
        window = self.faults[0] if self.faults else None
        overall, in_window = [], []
        for session_id, requested in self.workload.stop_requested.items():
            ended = sessions.get(session_id, {}).get("ended_at")
            if ended is None:
                continue
            overall.append(ended.timestamp() - requested)
            if window and window.started <= requested <= window.cleared:
                in_window.append(ended.timestamp() - requested)
        for label, values in (("all stops", overall), ("stops during the driver fault window", in_window)):
            if values:
                self.infos.append(
                    f"stop -> stopped, {label}: median {statistics.median(values):.2f} s, max {max(values):.2f} s "
                    f"({len(values)} stops)"
                )

    def agent_info(self, sessions: dict, running: set[str]) -> None:
        from labs.agent.client import AgentClient
        from labs.models import Allocation

        refs_by_node = collections.defaultdict(set)
        for sid, node in Allocation.objects.filter(released_at__isnull=True).values_list("session_id", "card__node__name"):
            if str(sid) in running:
                refs_by_node[node].add(sessions[str(sid)]["driver_ref"])
        for node, url in self.agent_urls.items():
            try:
                registered = {i.entity_id for i in AgentClient(url, self.token, timeout=5).instances()}
            except Exception as exc:
                self.infos.append(f"agent {node}: unreachable ({exc})")
                continue
            expected = refs_by_node[node]
            residual = registered - expected
            if residual:
                # Whose instances are they? The allocation keeps the entity id even where the session has no driver_ref.
                owners = collections.Counter()
                for state, ref in Allocation.objects.filter(entity_id__in=residual).values_list(
                    "session__state", "session__driver_ref"
                ):
                    owners[f"{state} session, driver_ref {'recorded' if ref else 'EMPTY'}"] += 1
                unknown = len(residual) - sum(owners.values())
                self.infos.append(
                    f"agent {node}: residual registrations belong to {dict(owners)}"
                    + (f", {unknown} to no allocation" if unknown else "")
                )
            self.infos.append(
                f"agent {node}: {len(registered)} registered instances for {len(expected)} running sessions; "
                f"{len(expected - registered)} running sessions not registered, {len(registered - expected)} residual "
                "(the reconciler unregisters residuals after LAB_RESIDUAL_GRACE_SECONDS)"
            )

    def report(self) -> int:
        w = self.workload
        print(flush=True)
        print("faults:")
        for number, fault in enumerate(self.faults, 1):
            start = fault.started - self.faults[0].started
            settled = f"{fault.settle_seconds:.2f} s" if fault.settle_seconds is not None else "NOT settled"
            print(
                f"  {number}. +{start:6.1f} s  {fault.name}: lasted {fault.cleared - fault.started:.1f} s, "
                f"{len(fault.stragglers)} in progress/fitting + {len(fault.effects)} after-effects, settle {settled}"
            )
            if fault.slowest:
                print(f"       slowest: {fault.slowest}")
        print(f"workload: {len(w.launched)} launched, {len(w.stop_requested)} stops, {w.db_retries} database retries")
        for line in self.infos:
            print(f"  info: {line}")
        print("checks:")
        strict = self.args.strict_timing
        for name, passed, detail in self.results:
            word = ("MET   " if passed else "MISSED") if name in self.timing and not strict else ("PASS" if passed else "FAIL")
            print(f"  {word}  {name}: {detail}")
        failed = sum(1 for name, passed, _ in self.results if not passed and (strict or name not in self.timing))
        missed = sum(1 for name, passed, _ in self.results if not passed and name in self.timing and not strict)
        passed = len(self.results) - failed - missed
        print(f"chaos: {passed} passed, {failed} failed, {missed} timing target(s) missed", flush=True)
        return 0 if failed == 0 else 1

    # -- teardown ---------------------------------------------------------------------------------

    def teardown(self, keep: bool) -> None:
        for proc in [*self.workers, self.beat, *self.agents.values(), self.redis]:
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop(timeout=10)
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        if self.db_created:
            try:
                self.db.drop()
                say(f"dropped database {self.db.name}")
            except Exception as exc:
                say(f"could NOT drop database {self.db.name}: {exc}")
        if keep:
            say(f"logs kept in {self.logs}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chaos = Chaos(args)

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    code = 2
    try:
        code = chaos.run()
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except SystemExit as exc:
        say(f"chaos: setup failed: {exc}")
        code = 2
    finally:
        chaos.teardown(keep=args.keep or code != 0)
    return code


if __name__ == "__main__":
    sys.exit(main())
