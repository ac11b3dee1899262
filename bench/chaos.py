"""``make chaos``: a class launching and stopping labs over HTTP while faults hit the portal's processes.

    .venv/bin/python -m bench.chaos                       # every fault (about 3 minutes on 2 cores)
    .venv/bin/python -m bench.chaos --only redis,postgres # the set-up, the class start and these faults
    .venv/bin/python -m bench.chaos --quick               # shorter outages, for development

Builds its own world and throws it away afterwards: its own PostgreSQL server (``initdb`` into a
temporary directory with the server binaries of this machine, on a free port; run as the
``postgres`` user when the harness runs as root), its own ``redis-server`` on a free port, a
temporary ``PORTAL_VAR_DIR``. So it can restart either server without touching anyone else's.
On them run two Daphne processes (one listening socket), two Celery workers (prefork x 4, as
``deploy/`` runs them), Celery beat and one simulated node agent per node, all with the
simulator driver (2 s starts, 1 s controller period, 5 s reconciler period).

The class: two nodes of 8 x 910B 64 GiB, one course, 200 students, four templates that each
reach one of FlexNPU's per-card caps: ``core`` (25 %, 8 GiB: four fill a card's AI Core),
``memory`` (5 %, 16 GiB: four fill its memory), ``small`` (5 %, 2 GiB: sixteen reach the
development instance cap) and ``inference`` (10 %, 4 GiB, inference: eight reach the inference
cap). The class start fills the first node template by template, so every cap is reached; the
faults then run on both nodes. Students log in once (a session cookie each) and do everything
else over HTTP through Daphne: ``POST /sessions/launch/`` and ``POST /sessions/<id>/stop/`` with
JSON answers, pressing again a second later after a 5xx or no answer, as a student would.

Each fault (``FAULTS``, in that order; ``--only`` picks some) starts a class burst — launches by
idle students and stops of running labs, all pressed at once from many threads — and lands
once every press is out and 60 of them are starting or stopping (at least ``--lead`` s after the
first; counted again afterwards from the presses and the ledger's timestamps: fewer than 50
fails the run). A fault that lasts meets a second burst half-way (the agent faults: once the
portal has marked the node unavailable; those launches must go to the other node). While it lasts and until its
sessions settle, the run records every press's HTTP status, whether a launch or stop answered
5xx was committed anyway, each launch's time to running and each stop's time to ended, and the
time from the fault clearing to the last of its sessions settling. A thread checks the ledger's
invariants every 0.5 s all along (per card: AI Core floors <= 100 %, memory <= the card's,
instances <= 16, or 8 with an inference instance; per node <= 128, or 64; an allocation exactly
for the sessions that hold one, released once, with one usage record; at most one open session
per student). After each fault it looks for leaks: simulator instances without a live session,
agent registrations without a live allocation, twice 1.5 s apart (a reconciler period apart
after an agent fault).

Printed: a table with one row per fault (in flight when it landed, sessions, failed, stuck,
lost, leaked, 5xx, 5xx answers to committed requests, start and stop p99 during it, settle time
after it, each against ``bench.chaos_report.TARGETS``), every failed check, and PASS or FAIL.
The exit code is 0 on PASS, 1 on FAIL (any target missed, timing ones included), 2 when the run
itself broke.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import os
import random
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
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from bench.chaos_report import (
    MIN_IN_FLIGHT,
    TARGETS,
    Check,
    FaultFigures,
    Item,
    Press,
    Target,
    fault_checks,
    fault_figures,
    fault_table,
    verdict,
)
from bench.harness import ROOT, free_port, http_request

CARD_MIB = 64 * 1024
CARDS_PER_NODE = 8
NODES = ("n1", "n2")
DEV_CARD_CAP, INFERENCE_CARD_CAP = 16, 8
DEV_NODE_CAP, INFERENCE_NODE_CAP = 128, 64
HOLDS = ("admitted", "starting", "running", "stopping")
IN_PROGRESS = ("admitted", "starting", "stopping")
TERMINAL = ("stopped", "failed")
INJECTED_MESSAGE = "chaos: injected instance failure"
DATABASE = "chaos"
# A student presses again this long after a 5xx or no answer, for at most RETRY_FOR seconds.
RETRY_AFTER, RETRY_FOR = 1.0, 20.0
# Sessions in flight beyond --min-in-flight before a fault lands: some settle while it is injected.
IN_FLIGHT_MARGIN = 10


@dataclass(frozen=True)
class TemplatePlan:
    slug: str
    scenario: str
    core_percent: int
    memory_mib: int
    students: int  # students who use it
    first_fill: int  # of them, launched in the class start (on the first node)
    cap: str  # the per-card cap it reaches


TEMPLATES = (
    TemplatePlan("core", "development", 25, 8 * 1024, 25, 8, "AI Core 100 %"),
    TemplatePlan("memory", "development", 5, 16 * 1024, 25, 8, "memory 64 GiB"),
    TemplatePlan("small", "development", 5, 2 * 1024, 100, 32, "16 development instances"),
    TemplatePlan("inference", "inference", 10, 4 * 1024, 50, 16, "8 inference instances"),
)


@dataclass(frozen=True)
class FaultPlan:
    name: str
    launches: int  # idle students who press Launch in the burst it lands on
    stops: int  # running labs stopped in that burst (-1: every running lab)
    mid: tuple[int, int] | None  # launches and stops pressed half-way through it, while it holds
    summary: str
    lead: float | None = None  # earliest it lands after the burst's first press (None: --lead)


FAULTS = (
    FaultPlan("control", 40, 40, None, "no fault: the burst alone, the floor of every target"),
    FaultPlan("driver", 40, 40, (15, 15), "the cluster API fails 30 % of creates and deletes and creates take 0.5 s, for 8 s"),
    FaultPlan("worker", 40, 40, (15, 15), "kill -9 of one Celery worker's process group, restarted after --down s"),
    FaultPlan("beat", 40, 40, (15, 15), "kill -9 of Celery beat, restarted after --down s"),
    FaultPlan("redis", 40, 40, (15, 15), "kill -9 of the Redis server, restarted empty on its port after --down s"),
    FaultPlan("postgres", 40, 40, (15, 15), "PostgreSQL stopped (fast shutdown), started again after --down s"),
    FaultPlan("backends", 40, 40, (15, 15), "pg_terminate_backend of every portal connection, every 0.2 s for 3 s"),
    FaultPlan("inject", 40, 40, None, "three running instances fail (inject_failure) as the burst lands"),
    FaultPlan("agent-pause", 35, 35, (15, 15), "node n1's agent stopped (SIGSTOP) for --agent-down s, then continued"),
    FaultPlan("agent-kill", 35, 35, (15, 15), "node n1's agent killed for --agent-down s, started again (it forgets)"),
    # The storm is the fault: it lands as its last stop is pressed.
    FaultPlan("storm", 0, -1, None, "every running lab stopped at once", lead=0.0),
)
FAULT_NAMES = tuple(f.name for f in FAULTS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", default="", metavar="FAULT[,FAULT]", help=f"run only these faults, in the usual order: {', '.join(FAULT_NAMES)}"
    )
    parser.add_argument("--quick", action="store_true", help="shorter outages (--down 2, --agent-down 6) for development")
    parser.add_argument(
        "--down", type=float, default=3.0, help="seconds a killed worker, beat, Redis or PostgreSQL stays down (3)"
    )
    parser.add_argument("--agent-down", type=float, default=12.0, help="seconds the node agent stays paused or dead (12)")
    parser.add_argument(
        "--lead",
        type=float,
        default=0.5,
        help="earliest a fault lands after its burst's first press, s (0.5); it lands once --min-in-flight + "
        f"{IN_FLIGHT_MARGIN} sessions are in flight, or as soon as fewer are than a moment before, or at 3 s",
    )
    parser.add_argument("--settle-bound", type=float, default=30.0, help="longest wait for a fault's sessions to settle (30)")
    parser.add_argument("--start-delay", type=float, default=2.0, help="LAB_SIMULATOR_DELAY_SECONDS (2)")
    parser.add_argument("--controller-seconds", type=float, default=1.0, help="LAB_CONTROLLER_SECONDS (1)")
    parser.add_argument("--reconcile-seconds", type=float, default=5.0, help="RECONCILE_SECONDS (5)")
    parser.add_argument("--threads", type=int, default=96, help="client threads pressing launch and stop (96)")
    parser.add_argument(
        "--min-in-flight",
        type=int,
        default=MIN_IN_FLIGHT,
        help=f"sessions starting or stopping a fault must meet ({MIN_IN_FLIGHT}; lower only while developing)",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs) even when it passes")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in FAULT_NAMES]
    if unknown:
        parser.error(f"--only: unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULT_NAMES)}")
    args.faults = [f for f in FAULTS if not chosen or f.name in chosen]
    if args.quick:
        if args.down == parser.get_default("down"):
            args.down = 2.0
        if args.agent_down == parser.get_default("agent_down"):
            args.agent_down = 6.0
    if args.down <= 0 or args.agent_down <= 0 or args.lead < 0 or args.threads < 1:
        parser.error("--down and --agent-down must be positive, --lead >= 0, --threads >= 1")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 30)
    return args


T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {message}", flush=True)


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if predicate():
                return True
        time.sleep(interval)
    return False


# -- servers and processes ----------------------------------------------------------------------------


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


# -- the ledger, read by the harness ------------------------------------------------------------------


class Ledger:
    """The harness's reads of the portal's database (its own connection, reconnected after a
    restart or a terminated backend; named so the backend fault spares it)."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.conn = None

    def _connect(self):
        import psycopg

        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=3, application_name=self.name)
        return self.conn

    def rows(self, sql: str, params: object = None, *, attempts: int = 120) -> list[tuple]:
        """The rows of one statement (none for a command), trying again for a minute while the database is away."""
        import psycopg

        for attempt in range(attempts):
            try:
                cursor = self._connect().execute(sql, params)
                return cursor.fetchall() if cursor.description else []
            except psycopg.OperationalError:
                with contextlib.suppress(Exception):
                    self.conn.close()
                self.conn = None
                if attempt == attempts - 1:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def snapshot(self, queries: dict[str, str]) -> dict[str, list[tuple]]:
        """Several queries in one repeatable-read transaction: they see one moment of the ledger."""
        conn = self._connect()
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return {name: conn.execute(sql).fetchall() for name, sql in queries.items()}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.conn is not None:
                self.conn.close()


@dataclass
class Violation:
    at: float
    kind: str
    detail: str


INVARIANT_QUERIES = {
    "cards": """
        SELECT c.id, n.name, c.memory_mib, SUM(a.core_percent), SUM(a.memory_mib), COUNT(*),
               BOOL_OR(a.scenario = 'inference')
          FROM labs_allocation a JOIN labs_card c ON c.id = a.card_id JOIN labs_node n ON n.id = c.node_id
         WHERE a.released_at IS NULL GROUP BY c.id, n.name, c.memory_mib""",
    "holds": f"""
        SELECT s.id, s.state, a.id IS NOT NULL, a.released_at IS NULL
          FROM labs_labsession s LEFT JOIN labs_allocation a ON a.session_id = s.id
         WHERE (s.state IN {HOLDS!r} AND (a.id IS NULL OR a.released_at IS NOT NULL))
            OR (s.state NOT IN {HOLDS!r} AND a.id IS NOT NULL AND a.released_at IS NULL)""",
    "usage": """
        SELECT a.id, a.released_at IS NULL, COUNT(u.id)
          FROM labs_allocation a LEFT JOIN labs_usagerecord u ON u.allocation_id = a.id
         GROUP BY a.id
        HAVING (a.released_at IS NULL AND COUNT(u.id) > 0) OR (a.released_at IS NOT NULL AND COUNT(u.id) <> 1)""",
    "released": "SELECT id, released_at FROM labs_allocation WHERE released_at IS NOT NULL",
    "students": f"""
        SELECT student_id, COUNT(*) FROM labs_labsession WHERE state NOT IN {TERMINAL!r}
         GROUP BY student_id HAVING COUNT(*) > 1""",
    "states": "SELECT state, COUNT(*) FROM labs_labsession GROUP BY state",
}


class InvariantMonitor(threading.Thread):
    """Checks the ledger's invariants every ``interval`` seconds until stopped, in one snapshot each.

    Per card: Σ AI Core floors <= 100, Σ memory <= the card's, instances <= 16 (8 once an
    inference instance is there); per node <= 128 (64). The sessions in admitted, starting,
    running or stopping hold exactly one unreleased allocation and no other session holds one;
    a released allocation keeps its ``released_at`` and has exactly one usage record (a live one
    none); no student has two open sessions (the course allows one). Also remembers how close
    the cards came to each cap: the checks above can only fail where the class reaches them.
    """

    def __init__(self, url: str, interval: float = 0.5) -> None:
        super().__init__(name="invariants", daemon=True)
        self.ledger = Ledger(url, "chaos-monitor")
        self.interval = interval
        self.stopping = threading.Event()
        self.violations: list[Violation] = []
        self.samples = 0
        self.unavailable = 0
        self.released: dict[int, object] = {}
        self.max_core = 0
        self.max_memory_share = 0.0  # of the card's memory
        self.max_dev_instances = 0  # on a card without an inference instance
        self.max_inference_instances = 0  # on a card with one
        self.states: dict[str, int] = {}

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            try:
                self.check_once()
            except Exception:  # the database is restarting or the backend was terminated
                self.unavailable += 1
                self.ledger.close()
                self.ledger.conn = None

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
        self.ledger.close()

    def flag(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(time.time(), kind, detail))

    def check_once(self) -> None:
        seen = self.ledger.snapshot(INVARIANT_QUERIES)
        now_states = dict(seen["states"])
        per_node: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for card_id, node, card_mib, core, mib, count, inference in seen["cards"]:
            cap = INFERENCE_CARD_CAP if inference else DEV_CARD_CAP
            if core > 100 or mib > card_mib or count > cap:
                self.flag(
                    "card over its limits", f"card {card_id} on {node}: {core} %, {mib} MiB of {card_mib}, {count} of {cap}"
                )
            per_node[node][0] += count
            per_node[node][1] |= bool(inference)
            self.max_core = max(self.max_core, core)
            self.max_memory_share = max(self.max_memory_share, mib / card_mib)
            if inference:
                self.max_inference_instances = max(self.max_inference_instances, count)
            else:
                self.max_dev_instances = max(self.max_dev_instances, count)
        for node, (count, inference) in per_node.items():
            cap = INFERENCE_NODE_CAP if inference else DEV_NODE_CAP
            if count > cap:
                self.flag("node over its limit", f"{node}: {count} instances of {cap}")
        for session_id, state, has, _live in seen["holds"]:
            what = "without an unreleased allocation" if state in HOLDS else "holding an unreleased allocation"
            self.flag("allocation out of step", f"{state} session {session_id} {what} (allocation {'yes' if has else 'none'})")
        for allocation_id, live, records in seen["usage"]:
            state = "live" if live else "released"
            self.flag("release not exactly once", f"{state} allocation {allocation_id} with {records} usage record(s)")
        for allocation_id, released_at in seen["released"]:
            before = self.released.setdefault(allocation_id, released_at)
            if before != released_at:
                self.flag("released twice", f"allocation {allocation_id} released at {before} and again at {released_at}")
                self.released[allocation_id] = released_at
        for student_id, count in seen["students"]:
            self.flag("two open sessions", f"student {student_id} has {count} open sessions (the course allows 1)")
        self.states = now_states
        self.samples += 1

    def between(self, start: float, end: float) -> list[Violation]:
        return [v for v in list(self.violations) if start <= v.at <= end]


# -- the class ------------------------------------------------------------------------------------------


@dataclass
class Student:
    index: int
    user_id: int
    template_id: int
    template: str
    cookie: str
    csrf: str


@dataclass
class Burst:
    """One class burst: who presses Launch and which labs are stopped, then the futures of their presses."""

    launchers: list[Student]
    stoppers: list[tuple[Student, str]]
    # Judged wherever its labs run (pressed half-way through a node's outage: placement must avoid the node).
    anywhere: bool = False
    futures: list[Future] = field(default_factory=list)
    began: float = 0.0
    pressed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def press(self) -> None:
        with self.lock:
            self.pressed += 1

    def items(self, timeout: float) -> list[Item]:
        deadline = time.monotonic() + timeout
        return [f.result(timeout=max(0.1, deadline - time.monotonic())) for f in self.futures]


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.run_id = uuid.uuid4().hex[:8]
        self.dir = Path(tempfile.mkdtemp(prefix=f"npu-lab-chaos-{self.run_id}-"))
        self.logs = self.dir / "logs"
        self.logs.mkdir()
        self.postgres: PostgresServer | None = None
        self.redis_port = free_port()
        self.token = secrets.token_urlsafe(24)
        self.redis: Proc | None = None
        self.webs: list[Proc] = []
        self.workers: list[Proc] = []
        self.beat: Proc | None = None
        self.agents: dict[str, Proc] = {}
        self.agent_urls: dict[str, str] = {}
        self.listener: socket.socket | None = None
        self.monitor: InvariantMonitor | None = None
        self.ledger: Ledger | None = None
        self.pool = ThreadPoolExecutor(max_workers=args.threads, thread_name_prefix="student")
        self.students: list[Student] = []
        self.stop_requested: set[str] = set()
        self.injected: set[str] = set()  # labs failed on purpose
        self.doomed: set[str] = set()  # those of the fault under way
        self.crashes: list[str] = []
        self.rows: list[tuple[FaultFigures, Target, list[Check]]] = []
        self.checks: list[Check] = []

    # -- environment and set-up ------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "LAB_", "CELERY_", "DATABASE_", "REDIS_"))}
        return {
            **keep,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DEBUG": "0",
            "SECRET_KEY": f"chaos-{self.run_id}-" + secrets.token_urlsafe(40),
            "DATABASE_URL": self.postgres.url(DATABASE),
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "CHANNELS_PREFIX": f"chaos-{self.run_id}",
            "PORTAL_VAR_DIR": str(self.dir / "var"),
            "LAB_DRIVER": "labs.drivers.simulator.SimulatorDriver",
            "LAB_SIMULATOR_DELAY_SECONDS": str(self.args.start_delay),
            "LAB_CONTROLLER_SECONDS": str(self.args.controller_seconds),
            "RECONCILE_SECONDS": str(self.args.reconcile_seconds),
            "LAB_AGENT_TOKEN": self.token,
            "LAB_AGENT_TIMEOUT_SECONDS": "2",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "INFO",
        }

    def setup(self) -> None:
        args = self.args
        say(f"run {self.run_id}: dir {self.dir}, seed {args.seed}, faults {', '.join(f.name for f in args.faults)}")
        if not shutil.which("redis-server"):
            raise SystemExit("chaos needs redis-server on PATH (apt-get install redis-server)")
        self.postgres = PostgresServer(free_port())
        self.postgres.init()
        self.postgres.start()
        admin = Ledger(self.postgres.url("postgres"), "chaos-harness")
        admin.rows(f'CREATE DATABASE "{DATABASE}"')
        admin.close()
        say(f"PostgreSQL {self.postgres.bindir.parent.name} on port {self.postgres.port} ({self.postgres.dir})")
        env = self.base_env()
        redis_argv = [shutil.which("redis-server"), "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", ""]
        redis_argv += ["--appendonly", "no", "--daemonize", "no", "--dir", str(self.dir)]
        self.redis = Proc("redis", redis_argv, env, self.logs)
        self.redis.start()
        if not wait_until(lambda: redis_up(self.redis_port), 10):
            raise SystemExit(f"redis-server did not answer on port {self.redis_port}; see {self.redis.log_path}")

        # This process: the schema, the class and the students' logins; no pool of its own, and
        # only errors in its log (during the Redis outage every page update would warn).
        os.environ.update(env, LOG_LEVEL="ERROR", DATABASE_POOL_SIZE="0")
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        started = time.monotonic()
        call_command("migrate", verbosity=0)
        say(f"migrated in {time.monotonic() - started:.1f} s")
        self.build_class()
        connections.close_all()
        self.ledger = Ledger(self.postgres.url(DATABASE), "chaos-harness")

        for name in NODES:
            port = free_port()
            self.agent_urls[name] = f"http://127.0.0.1:{port}"
            argv = [sys.executable, "-m", "nodeagent", "--driver", "simulated", "--node", name, "--host", "127.0.0.1"]
            self.agents[name] = Proc(f"agent-{name}", [*argv, "--port", str(port)], {**env, "AGENT_TOKEN": self.token}, self.logs)
            self.agents[name].start()
        for name, url in self.agent_urls.items():
            self.ledger.rows("UPDATE labs_node SET agent_url = %s WHERE name = %s", [url, name])
            if not wait_until(lambda url=url: agent_up(url), 20):
                raise SystemExit(f"agent {name} did not answer at {url}")

        # Two Daphne processes on one listening socket, bound here and inherited (as bench.load runs them).
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1024)
        fd = self.listener.fileno()
        self.base_url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        web_env = {**env, "LOG_LEVEL": "WARNING"}
        for number in (1, 2):
            argv = [sys.executable, "-m", "daphne", "--fd", str(fd), "portal.asgi:application"]
            self.webs.append(Proc(f"daphne{number}", argv, web_env, self.logs, pass_fds=(fd,)))
        worker_argv = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--loglevel", "INFO", "--pool", "prefork"]
        worker_argv += ["--concurrency", "4", "--without-gossip", "--without-mingle", "--without-heartbeat"]
        for number in (1, 2):
            self.workers.append(
                Proc(f"worker{number}", [*worker_argv, "--hostname", f"chaos-w{number}-{self.run_id}@%h"], env, self.logs)
            )
        beat_argv = [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO"]
        self.beat = Proc("beat", [*beat_argv, "--schedule", str(self.dir / "celerybeat-schedule")], env, self.logs)
        for proc in [*self.webs, *self.workers, self.beat]:
            proc.start()
        for worker in self.workers:
            if not worker.wait_for_log(" ready.", 90):
                raise SystemExit(f"{worker.name} did not start; see {worker.log_path}")
        if not self.beat.wait_for_log("beat: Starting", 60):
            raise SystemExit(f"beat did not start; see {self.beat.log_path}")
        if not wait_until(lambda: http_request("GET", f"{self.base_url}/accounts/login/", timeout=5).status == 200, 60):
            raise SystemExit(f"Daphne did not answer at {self.base_url}; see {self.webs[0].log_path}")
        home = http_request("GET", f"{self.base_url}/", headers={"Cookie": self.students[0].cookie})
        if home.status != 200:
            raise SystemExit(f"a logged-in student gets HTTP {home.status} for / (expected 200)")
        say(f"started Redis, 2 agents, 2 Daphne at {self.base_url}, 2 workers (prefork x 4), beat")

    def build_class(self) -> None:
        from django.contrib.auth import get_user_model
        from django.contrib.auth.hashers import make_password

        from bench.classstart import login_cookies_direct
        from labs.models import Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

        for name in NODES:
            node = Node.objects.create(name=name)
            Card.objects.bulk_create(
                Card(node=node, index=i, die_id=f"{name}-die-{i}", chip_type="Ascend910B", memory_mib=CARD_MIB)
                for i in range(CARDS_PER_NODE)
            )
        institution = Institution.objects.create(name="Chaos University", slug="chaos")
        course = Course.objects.create(institution=institution, code="CHAOS", title="Faults", term="2026")
        cards = len(NODES) * CARDS_PER_NODE
        CourseQuota.objects.create(
            course=course,
            core_percent=100 * cards,
            memory_mib=CARD_MIB * cards,
            instance_count=DEV_NODE_CAP * len(NODES),
            sessions_per_student=1,
            max_session_minutes=600,
        )
        User = get_user_model()
        password = make_password(None)
        users = []
        for plan in TEMPLATES:
            template = LabTemplate.objects.create(
                institution=institution,
                name=plan.slug,
                slug=plan.slug,
                image="jupyter/base:latest",
                core_percent=plan.core_percent,
                memory_mib=plan.memory_mib,
                scenario=plan.scenario,
                idle_timeout_minutes=600,
                max_lifetime_minutes=600,
            )
            course.templates.add(template)
            made = User.objects.bulk_create(
                User(username=f"chaos-{plan.slug}-{i:03d}", password=password) for i in range(plan.students)
            )
            users += [(user, template, plan) for user in made]
        Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u, _, _ in users)
        cookies = login_cookies_direct([u for u, _, _ in users])
        self.course_id = course.pk
        self.students = [
            Student(i, user.pk, template.pk, plan.slug, *cookies[user.pk]) for i, (user, template, plan) in enumerate(users)
        ]
        say(
            f"class: {len(self.students)} students on {len(NODES)} nodes x {CARDS_PER_NODE} x 910B 64 GiB; templates "
            + ", ".join(f"{p.slug} {p.core_percent} %/{p.memory_mib // 1024} GiB {p.scenario} x {p.students}" for p in TEMPLATES)
        )

    # -- students over HTTP ------------------------------------------------------------------------

    def _headers(self, student: Student) -> dict[str, str]:
        return {
            "Cookie": student.cookie,
            "X-CSRFToken": student.csrf,
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
        }

    def _press_until_answered(self, send: Callable[[], object], burst: Burst) -> tuple[list[Press], object]:
        """Press, and again ``RETRY_AFTER`` s after a 5xx or no answer, for up to ``RETRY_FOR`` s."""
        presses: list[Press] = []
        began = time.time()
        burst.press()
        while True:
            sent = time.time()
            response = send()
            presses.append(Press(sent, time.time(), response.status))
            if response.status and response.status < 500 or time.time() - began > RETRY_FOR:
                return presses, response
            time.sleep(RETRY_AFTER)

    def launch(self, student: Student, burst: Burst) -> Item:
        body = urlencode({"course": self.course_id, "template": student.template_id})
        presses, last = self._press_until_answered(
            lambda: http_request(
                "POST", f"{self.base_url}/sessions/launch/", headers=self._headers(student), body=body, timeout=30
            ),
            burst,
        )
        item = Item("launch", student.index, presses)
        if last.status == 201:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                item.session_id = last.json()["session"]["id"]  # else found in the ledger, like a 5xx's
        elif 400 <= last.status < 500:
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                item.refused = str(last.json()["error"])
            item.refused = item.refused or f"HTTP {last.status}"
        return item

    def stop(self, student: Student, session_id: str, burst: Burst) -> Item:
        self.stop_requested.add(session_id)
        presses, last = self._press_until_answered(
            lambda: http_request(
                "POST", f"{self.base_url}/sessions/{session_id}/stop/", headers=self._headers(student), body="", timeout=30
            ),
            burst,
        )
        item = Item("stop", student.index, presses, session_id=session_id)
        if last.status == 409:
            item.refused = ""  # already ending: what the student wanted is under way
        elif 400 <= last.status < 500:
            item.refused = f"HTTP {last.status}"
        return item

    def who_is(self) -> tuple[list[Student], dict[int, str], dict[str, int]]:
        """Idle students (no open session), the running labs (student index -> session id), running labs per node."""
        by_user = {s.user_id: s for s in self.students}
        rows = self.ledger.rows(
            """SELECT s.student_id, s.id::text, s.state, COALESCE(n.name, '')
                 FROM labs_labsession s LEFT JOIN labs_allocation a ON a.session_id = s.id AND a.released_at IS NULL
                 LEFT JOIN labs_card c ON c.id = a.card_id LEFT JOIN labs_node n ON n.id = c.node_id
                WHERE s.state NOT IN ('stopped', 'failed')"""
        )
        busy = {user_id for user_id, *_ in rows}
        running = {by_user[user_id].index: sid for user_id, sid, state, _ in rows if state == "running"}
        per_node = collections.Counter(node for _, _, state, node in rows if state == "running")
        return [s for s in self.students if s.user_id not in busy], running, dict(sorted(per_node.items()))

    def plan_bursts(self, plan: FaultPlan) -> tuple[list[Burst], set[str]]:
        """The fault's bursts (the one it lands on, and the one pressed half-way through it) and the
        labs it fails on purpose, chosen now: during the fault the ledger may be out of reach."""
        idle, running, per_node = self.who_is()
        say(f"  running before it: {per_node}; {len(idle)} students idle")
        self.rng.shuffle(idle)
        candidates = sorted((i, sid) for i, sid in running.items() if sid not in self.injected)
        self.rng.shuffle(candidates)
        doomed = {sid for _, sid in candidates[:3]} if plan.name == "inject" else set()
        candidates = [(i, sid) for i, sid in candidates if sid not in doomed]
        shapes = [(plan.launches, plan.stops, False)] + ([(*plan.mid, True)] if plan.mid else [])
        bursts = []
        for launches, stops, anywhere in shapes:
            stops = len(candidates) if stops < 0 else stops
            launchers, idle = idle[:launches], idle[launches:]
            stopped, candidates = candidates[:stops], candidates[stops:]
            if len(launchers) < launches or len(stopped) < stops:
                say(f"  only {len(launchers)} idle students and {len(stopped)} labs to stop (wanted {launches} and {stops})")
            bursts.append(Burst(launchers, [(self.students[i], sid) for i, sid in stopped], anywhere=anywhere))
        return bursts, doomed

    def fire(self, burst: Burst) -> None:
        """Every press of the burst at once, each student on a thread of the pool."""
        work = [(self.launch, (s, burst)) for s in burst.launchers]
        work += [(self.stop, (student, sid, burst)) for student, sid in burst.stoppers]
        self.rng.shuffle(work)
        burst.began = time.time()
        burst.futures = [self.pool.submit(fn, *fn_args) for fn, fn_args in work]

    def live_in_flight(self, burst: Burst) -> int:
        """Pressed and not yet running (a launch) or ended (a stop), as the ledger says now."""
        settled = self.ledger.rows(
            """SELECT count(*) FROM labs_labsession
                WHERE (student_id = ANY(%s) AND created_at >= to_timestamp(%s)
                       AND (running_at IS NOT NULL OR ended_at IS NOT NULL))
                   OR (id::text = ANY(%s) AND ended_at IS NOT NULL)""",
            [[s.user_id for s in burst.launchers], burst.began - 0.5, [sid for _, sid in burst.stoppers]],
        )[0][0]
        return burst.pressed - settled

    def wait_to_land(self, burst: Burst, lead: float) -> int:
        """Wait until every press of the burst is out and ``--min-in-flight`` and a margin are in
        flight, at least ``lead`` s after its first press (at most 3 s); land at once when it is
        past its peak."""
        want = self.args.min_in_flight + IN_FLIGHT_MARGIN
        earliest, latest = burst.began + lead, burst.began + 3.0
        last = 0
        while True:
            live = self.live_in_flight(burst)
            now = time.time()
            ready = now >= earliest and burst.pressed >= len(burst.futures)
            if now >= latest or ready and (live >= want or live < last):
                return live
            last = live
            time.sleep(0.05)

    def resolve(self, items: list[Item], *, driver_fault: bool = False) -> None:
        """Fill in what the ledger says became of each launch and stop."""
        launches = [item for item in items if item.kind == "launch"]
        by_user = {s.index: s.user_id for s in self.students}
        rows = self.ledger.rows(
            """SELECT s.id::text, s.student_id, extract(epoch FROM s.created_at), extract(epoch FROM s.stopping_at),
                      extract(epoch FROM s.running_at), extract(epoch FROM s.ended_at), s.state, s.reason_code,
                      s.create_attempts, COALESCE(n.name, '')
                 FROM labs_labsession s LEFT JOIN labs_allocation a ON a.session_id = s.id
                 LEFT JOIN labs_card c ON c.id = a.card_id LEFT JOIN labs_node n ON n.id = c.node_id
                WHERE s.student_id = ANY(%s) OR s.id::text = ANY(%s)""",
            [[by_user[i.student] for i in launches], [i.session_id for i in items if i.kind == "stop"]],
        )
        from django.conf import settings

        attempts = settings.LAB_CREATE_ATTEMPTS
        by_id = {row[0]: row for row in rows}
        by_student = collections.defaultdict(list)
        for row in rows:
            by_student[row[1]].append(row)
        for item in items:
            row = None
            if item.kind == "launch":
                if item.session_id is None:
                    # Answered 5xx or refused: the student's session created after the first press, if any.
                    later = [r for r in by_student[by_user[item.student]] if float(r[2]) >= item.first_sent - 0.5]
                    row = min(later, key=lambda r: r[2]) if later else None
                    if row is not None:
                        item.session_id, item.refused = row[0], ""
                else:
                    row = by_id.get(item.session_id)
            else:
                row = by_id.get(item.session_id)
            if row is None:
                continue
            _, _, created, stopping, running, ended, state, reason, create_attempts, node = row
            item.node = node or item.node
            item.ended = ended is not None
            if item.kind == "launch":
                item.committed_at = float(created)
                item.running = running is not None
                item.done_at = float(running) if running is not None else (float(ended) if ended is not None else None)
                exhausted = reason == "session.create_failed" and create_attempts >= attempts - 1
                item.expected_failure = driver_fault and state == "failed" and exhausted
            else:
                item.committed_at = float(stopping) if stopping is not None else (float(ended) if ended is not None else None)
                item.done_at = float(ended) if ended is not None else None

    # -- the faults ------------------------------------------------------------------------------------

    def run_fault(self, plan: FaultPlan) -> None:
        """Land ``plan``'s fault on a class burst, hold it (pressing the mid-fault burst half-way),
        clear it, wait for its sessions to settle, and judge it."""
        args = self.args
        say(f"FAULT {plan.name}: {plan.summary}")
        bursts, self.doomed = self.plan_bursts(plan)
        self.fire(bursts[0])
        live = self.wait_to_land(bursts[0], self.args.lead if plan.lead is None else plan.lead)
        injected = time.time()
        hold, clear = getattr(self, f"fault_{plan.name.replace('-', '_')}")()
        marked = ""
        if len(bursts) > 1 and plan.name.startswith("agent"):
            # Once the portal knows the node is out (or 70 % into the outage): placement must go elsewhere.
            known = wait_until(lambda: not self.node_available("n1"), 0.7 * hold, interval=0.1)
            marked = f"n1 marked unavailable {time.time() - injected:.1f} s in" if known else "n1 NOT marked unavailable"
            self.fire(bursts[1])
        elif len(bursts) > 1:
            time.sleep(hold / 2)
            self.fire(bursts[1])
        time.sleep(max(0.0, injected + hold - time.time()))
        outcome = clear()
        cleared = time.time()
        say(
            f"  landed {injected - bursts[0].began:.1f} s after the first press with {live} in flight; "
            f"cleared {cleared - injected:.1f} s later: {outcome}"
        )
        items: list[Item] = []
        anywhere: set[int] = set()
        for burst in bursts:
            for item in burst.items(timeout=RETRY_FOR + 60):
                items.append(item)
                if burst.anywhere:
                    anywhere.add(id(item))
        deadline = cleared + args.settle_bound
        while True:
            self.resolve(items, driver_fault=plan.name == "driver")
            if all(item.settled_at() is not None for item in items) or time.time() > deadline:
                break
            time.sleep(0.25)
        settled = time.time()
        leaked, leak_notes = self.leaks(after_outage=plan.name.startswith("agent"))
        lost, lost_notes = self.lost(since=injected)
        stuck_elsewhere = self.stuck_elsewhere(before=bursts[0].began, items=items)
        faulted = "n1" if plan.name.startswith("agent") else ""

        def measured(item: Item) -> bool:
            return not faulted or item.node != faulted or id(item) in anywhere

        if plan.name == "inject":
            self.check_injected()
        notes = leak_notes + lost_notes
        for item in items:
            if item.refused:
                notes.append(f"{item.kind} of student {item.student} refused: {item.refused}")
            elif item.settled_at() is None:
                notes.append(f"{item.kind} of student {item.student} never settled (session {item.session_id})")
        if faulted:
            where = collections.Counter(
                item.node or "nowhere" for item in items if id(item) in anywhere and item.kind == "launch"
            )
            notes.append(f"{marked}; the launches pressed then went to {dict(where)}")
            elsewhere = marked.startswith("n1 marked") and set(where) <= {"n2"}
            self.checks.append(
                Check(f"{plan.name}: launches once n1 was out placed on n2", elsewhere, f"{marked}: {dict(where)}")
            )
        figures = fault_figures(
            plan.name,
            plan.summary,
            items,
            injected=injected,
            cleared=cleared,
            measured=measured,
            lost=lost,
            leaked=leaked,
            stuck_elsewhere=stuck_elsewhere,
            violations=len(self.monitor.between(bursts[0].began, settled)),
            notes=notes,
        )
        checks = fault_checks(figures, TARGETS[plan.name], min_in_flight=args.min_in_flight)
        self.rows.append((figures, TARGETS[plan.name], checks))
        missed = [c for c in checks if not c.passed]
        say(
            f"  {figures.in_flight} in flight when it landed; {figures.server_errors} 5xx, "
            f"{figures.committed_behind_500} behind a 500; start p99 {_s(figures.start_p99)}, stop p99 {_s(figures.stop_p99)}, "
            f"settle {_s(figures.settle)} ({figures.caught_at_clear} in flight at the clear); "
            + ("all targets met" if not missed else "MISSED: " + "; ".join(f"{c.what} ({c.detail})" for c in missed))
        )
        time.sleep(1.0)

    def check_injected(self) -> None:
        """The labs failed on purpose must end as failed: else the harness could not see a failure."""
        rows = self.ledger.rows("SELECT id::text, state FROM labs_labsession WHERE id::text = ANY(%s)", [sorted(self.doomed)])
        failed = sum(1 for _, state in rows if state == "failed")
        self.checks.append(
            Check("injected failures noticed", failed == len(self.doomed) > 0, f"{failed} of {len(self.doomed)} ended failed")
        )

    # Each fault: inject it now; return how long it holds and what clears it (returning what happened).

    def fault_control(self) -> tuple[float, Callable[[], str]]:
        return 0.0, lambda: "nothing to clear"

    def fault_driver(self) -> tuple[float, Callable[[], str]]:
        driver = self.simulator()
        driver.inject_api_faults(create_failure_rate=0.3, delete_failure_rate=0.3, create_delay_seconds=0.5)

        def clear() -> str:
            driver.clear_api_faults()
            return "the cluster API answers every call again"

        return 8.0, clear

    def fault_worker(self) -> tuple[float, Callable[[], str]]:
        worker = self.workers[0]
        worker.kill9()

        def clear() -> str:
            worker.start()
            return f"{worker.name} restarted, " + ("ready" if worker.wait_for_log(" ready.", 60) else "NOT ready")

        return self.args.down, clear

    def fault_beat(self) -> tuple[float, Callable[[], str]]:
        self.beat.kill9()

        def clear() -> str:
            self.beat.start()
            return "beat restarted, " + ("started" if self.beat.wait_for_log("beat: Starting", 30) else "NOT started")

        return self.args.down, clear

    def fault_redis(self) -> tuple[float, Callable[[], str]]:
        self.redis.kill9()

        def clear() -> str:
            self.redis.start()
            return "Redis answers again (empty)" if wait_until(lambda: redis_up(self.redis_port), 15) else "Redis NOT back"

        return self.args.down, clear

    def fault_postgres(self) -> tuple[float, Callable[[], str]]:
        self.postgres.stop("fast")

        def clear() -> str:
            self.postgres.start()
            return "PostgreSQL accepts connections again"

        return self.args.down, clear

    def fault_backends(self) -> tuple[float, Callable[[], str]]:
        admin = Ledger(self.postgres.url("postgres"), "chaos-harness")
        stopping = threading.Event()
        terminated = [0]

        def terminate() -> None:
            while not stopping.is_set():
                with contextlib.suppress(Exception):
                    terminated[0] += admin.rows(
                        """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                            WHERE datname = %s AND pid <> pg_backend_pid() AND application_name NOT LIKE 'chaos-%%'""",
                        [DATABASE],
                        attempts=1,
                    )[0][0]
                stopping.wait(0.2)

        thread = threading.Thread(target=terminate, name="terminate", daemon=True)
        thread.start()

        def clear() -> str:
            stopping.set()
            thread.join()
            admin.close()
            return f"{terminated[0]} backends terminated"

        return 3.0, clear

    def fault_inject(self) -> tuple[float, Callable[[], str]]:
        from labs.drivers import DriverError

        driver = self.simulator()
        for session_id in sorted(self.doomed):
            with contextlib.suppress(DriverError):
                driver.inject_failure(session_id, INJECTED_MESSAGE)
        self.injected |= self.doomed
        return 0.0, lambda: f"{len(self.doomed)} instances report FAILED"

    def fault_agent_pause(self) -> tuple[float, Callable[[], str]]:
        agent = self.agents["n1"]
        agent.signal_group(signal.SIGSTOP)

        def clear() -> str:
            agent.signal_group(signal.SIGCONT)
            return "agent continued, " + (
                "answering" if wait_until(lambda: agent_up(self.agent_urls["n1"]), 20) else "NOT answering"
            )

        return self.args.agent_down, clear

    def fault_agent_kill(self) -> tuple[float, Callable[[], str]]:
        agent = self.agents["n1"]
        agent.kill9()

        def clear() -> str:
            agent.start()
            ok = wait_until(lambda: agent_up(self.agent_urls["n1"]), 20)
            return "agent started again (no registrations), " + ("answering" if ok else "NOT answering")

        return self.args.agent_down, clear

    def fault_storm(self) -> tuple[float, Callable[[], str]]:
        return 0.0, lambda: "the stops are pressed"

    def node_available(self, name: str) -> bool:
        return bool(self.ledger.rows("SELECT available FROM labs_node WHERE name = %s", [name])[0][0])

    def simulator(self):
        from labs.drivers.simulator import SimulatorDriver

        return SimulatorDriver(state_dir=str(self.dir / "var" / "driver"))

    # -- leaks, losses, stuck sessions ---------------------------------------------------------------

    def leaks(self, *, after_outage: bool) -> tuple[int, list[str]]:
        """Instances and registrations without a live session, allocations held by ended sessions;
        only what is there in two looks 1.5 s apart (an instance being made is not a leak), or a
        reconciler period and 2 s apart after a node's outage (its agent is told on the next sync)."""
        first = self._leak_look()
        time.sleep(self.args.reconcile_seconds + 2 if after_outage else 1.5)
        second = self._leak_look()
        persistent = {kind: first[kind] & second[kind] for kind in first}
        notes = [f"leaked {kind}: {sorted(found)[:3]}" for kind, found in persistent.items() if found]
        return sum(len(found) for found in persistent.values()), notes

    def _leak_look(self) -> dict[str, set[str]]:
        from nodeagent.client import AgentClient, AgentError

        registered: dict[str, set[str]] = {}
        for node, url in self.agent_urls.items():
            try:
                registered[node] = {i.entity_id for i in AgentClient(url, self.token, timeout=3).instances()}
            except AgentError:
                registered[node] = set()
        instances = set(self.simulator().observe())
        rows = self.ledger.rows(
            f"""SELECT s.id::text, s.state, n.name, COALESCE(NULLIF(a.entity_id, ''), s.driver_ref), a.released_at IS NULL
                 FROM labs_labsession s JOIN labs_allocation a ON a.session_id = s.id
                 JOIN labs_card c ON c.id = a.card_id JOIN labs_node n ON n.id = c.node_id
                WHERE a.released_at IS NULL OR s.state IN {HOLDS!r}"""
        )
        live = {sid for sid, state, _, _, unreleased in rows if state in HOLDS}
        expected = collections.defaultdict(set)
        for _, state, node, ref, unreleased in rows:
            if unreleased and state in HOLDS and ref:
                expected[node].add(ref)
        return {
            "instances": instances - live,
            "registrations": {f"{node}:{ref}" for node, refs in registered.items() for ref in refs - expected[node]},
            "allocations": {sid for sid, state, _, _, unreleased in rows if unreleased and state not in HOLDS},
        }

    def lost(self, *, since: float) -> tuple[int, list[str]]:
        """Running labs that ended since ``since`` without their student asking (injected ones aside)."""
        rows = self.ledger.rows(
            """SELECT id::text, state, reason_code FROM labs_labsession
                WHERE running_at IS NOT NULL AND ended_at >= to_timestamp(%s)""",
            [since],
        )
        lost = [(sid, state, code) for sid, state, code in rows if sid not in self.stop_requested and sid not in self.injected]
        codes = collections.Counter(f"{state} ({code})" for _, state, code in lost)
        return len(lost), [f"lost: {dict(codes)}"] if lost else []

    def stuck_elsewhere(self, *, before: float, items: list[Item]) -> int:
        """Sessions of earlier faults still admitted, starting or stopping now: they had their time."""
        mine = {item.session_id for item in items}
        rows = self.ledger.rows(
            f"SELECT id::text FROM labs_labsession WHERE state IN {IN_PROGRESS!r} AND created_at < to_timestamp(%s)",
            [before],
        )
        return sum(1 for (sid,) in rows if sid not in mine)

    # -- the class start and the whole run --------------------------------------------------------------

    def class_start(self) -> None:
        """Fill the first node template by template, so each card reaches its template's cap."""
        by_template = collections.defaultdict(list)
        for student in self.students:
            by_template[student.template].append(student)
        everyone_running = True
        for plan in TEMPLATES:
            began = time.time()
            burst = Burst(by_template[plan.slug][: plan.first_fill], [])
            self.fire(burst)
            items = burst.items(timeout=120)
            ok = wait_until(lambda items=items: (self.resolve(items), all(i.running for i in items))[1], 60, interval=0.25)
            everyone_running &= ok
            say(
                f"class start: {plan.first_fill} x {plan.slug} running after {time.time() - began:.1f} s"
                if ok
                else f"class start: NOT all {plan.first_fill} x {plan.slug} running"
            )
        self.checks.append(
            Check(
                "class start: every lab of the class start running",
                everyone_running,
                f"{sum(p.first_fill for p in TEMPLATES)} launched",
            )
        )

    def supervise(self, done: threading.Event) -> None:
        """Restart a web process, worker or beat that exited by itself, as systemd would; each is a failed check."""
        while not done.wait(0.5):
            for proc in [*self.webs, *self.workers, self.beat]:
                with proc.lock:
                    if proc.expected_down or proc.alive():
                        continue
                    code = proc.process.returncode
                    last = [line for line in proc.log_since_start().splitlines() if "CRITICAL" in line or "Error" in line]
                    why = last[-1].strip()[:200] if last else "nothing in its log"
                    self.crashes.append(f"{proc.name} exited by itself (code {code}): {why}")
                    say(f"SUPERVISOR: {proc.name} exited by itself (code {code}): {why}; restarting it")
                    proc.start()

    def run(self) -> int:
        self.setup()
        self.monitor = InvariantMonitor(self.postgres.url(DATABASE))
        self.monitor.start()
        done = threading.Event()
        threading.Thread(target=self.supervise, args=(done,), name="supervisor", daemon=True).start()
        started = time.monotonic()
        try:
            self.class_start()
            for plan in self.args.faults:
                self.run_fault(plan)
            self.final()
        finally:
            done.set()
            self.monitor.stop()
        say(f"faults took {time.monotonic() - started:.0f} s")
        return self.report()

    def final(self) -> None:
        m = self.monitor
        caps = {
            "AI Core 100 %": m.max_core >= 100,
            "memory 64 GiB": m.max_memory_share >= 1.0,
            "16 development instances": m.max_dev_instances >= DEV_CARD_CAP,
            "8 inference instances": m.max_inference_instances >= INFERENCE_CARD_CAP,
        }
        self.checks.append(
            Check(
                "every per-card cap reached (so its check could fail)",
                all(caps.values()),
                f"most seen on a card: {m.max_core} % AI Core, {m.max_memory_share:.0%} of its memory, "
                f"{m.max_dev_instances} development instances, {m.max_inference_instances} with inference",
            )
        )
        self.checks.append(
            Check(
                "ledger invariants checked all along",
                not m.violations and m.samples >= 10,
                f"{m.samples} checks every 0.5 s ({m.unavailable} while the database was away), {len(m.violations)} violations"
                + "".join(f"; {v.kind}: {v.detail}" for v in m.violations[:5]),
            )
        )
        self.checks.append(Check("no process died by itself", not self.crashes, "; ".join(self.crashes) or "none"))

    def report(self) -> int:
        print(flush=True)
        print("faults (latencies in seconds, value/target; ! a missed target; - nothing to measure):")
        for line in fault_table(self.rows):
            print(f"  {line}")
        print("per fault, targets missed and what was seen:")
        for figures, _, checks in self.rows:
            for check in checks:
                if not check.passed:
                    print(f"  FAIL  {figures.name}: {check.what}: {check.detail}")
            for note in figures.notes:
                print(f"        {figures.name}: {note}")
        print("the whole run:")
        for check in self.checks:
            print(f"  {'PASS' if check.passed else 'FAIL'}  {check.what}: {check.detail}")
        everything = [c for _, _, checks in self.rows for c in checks] + self.checks
        ok = verdict(everything)
        print(f"chaos: {'PASS' if ok else 'FAIL'} ({sum(not c.passed for c in everything)} of {len(everything)} checks failed)")
        return 0 if ok else 1

    # -- teardown --------------------------------------------------------------------------------------

    def teardown(self, keep: bool) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in [*self.webs, *self.workers, self.beat, *self.agents.values(), self.redis]:
            if proc is not None:
                with contextlib.suppress(Exception):
                    proc.stop(timeout=10)
        if self.ledger is not None:
            self.ledger.close()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        if self.listener is not None:
            self.listener.close()
        if self.postgres is not None:
            if keep:
                with contextlib.suppress(Exception):
                    shutil.copy(self.postgres.log, self.logs / "postgres.log")
            self.postgres.remove()
        if keep:
            say(f"logs kept in {self.logs}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chaos = Chaos(args)

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    code = 2
    began = time.monotonic()
    try:
        code = chaos.run()
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except SystemExit as exc:
        say(f"chaos: set-up failed: {exc}")
        code = 2
    finally:
        chaos.teardown(keep=args.keep or code != 0)
    say(f"make chaos took {time.monotonic() - began:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
