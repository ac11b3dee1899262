"""Load on the real portal with Locust: students, instructors and operators at once, against Daphne.

    .venv/bin/python -m bench.load                # 300 students, 20 instructors, 2 operators, 60 s (2-5 min)
    .venv/bin/python -m bench.load --quick        # 30 users, 20 s
    make load LOAD_ARGS="--duration 90"

What runs, all on this machine and all real processes, each run with its own resources (the
helpers of bench.harness and bench.classstart):
  - a new PostgreSQL database (bench_load_<run>, migrated, dropped at the end, its login role
    limited to --db-connection-limit connections) and a Redis database number of its own;
  - --web-processes Daphne processes (one per core by default) serving portal.asgi on one listening
    socket on a free port, bound here and inherited (``daphne --fd``), DEBUG off; --workers Celery workers (prefork,
    --concurrency each) and beat; the simulator driver, whose labs start --start-delay seconds
    after they are created;
  - Locust (bench/locustfile.py) as a headless subprocess, with FastHttpUser clients and
    websocket-client sockets.

Data: --courses courses of one institution, the students spread over them, two instructors per
course (--instructors in all), --operators operators of the institution (also is_staff); every
course's quota fits all its students at once, on ceil(students / 128) nodes of 8 x 910B 64 GiB;
one "small" template (5 % AI Core, 4 GiB). Every account has its own username and the right
password (a login lockout counts failures per username).

Users, each logging in once through the login form (GET for the CSRF token, POST; at most
--login-concurrency at a time; reported apart: the password hash dominates it):
  - Student: keeps /ws/sessions/ open like the dashboard does (reconnecting like sessions.js);
    in a loop: GET / (dashboard), POST /sessions/launch/ (Accept: application/json, CSRF
    token), POST /sessions/<id>/stop/ a moment later, then wait for the socket to show the lab
    ended (the course allows one session at a time); --think seconds between steps. The
    students together aim at --rate launch + stop requests/s (default 60: the target and a
    fifth): each starts its loop every 2 x students / rate seconds (10 s for 300 at 60/s), at
    once when the last took longer, so a slow portal shows as a rate below the target. With
    --rate 0 they loop as fast as they can: the portal's saturation point.
    "launch -> socket" is the time from sending the launch to the first socket message carrying
    the new session (sent by the controller's run that admits it: the launch answer itself
    carries the queued session), "stop -> socket" from sending the stop to the first message
    showing it stopping or stopped (sent by the web process on commit). "launch -> running"
    (the simulator's start included) is shown for the labs that were running before their stop.
  - Instructor: keeps /ws/sessions/?course=<id> open like the course page; GET /courses/<id>/
    and GET /teach/.
  - Operator: GET /ops/ (the cluster page). Answered 404 throughout, it is reported as missing,
    not as failures.

Nobody works until every user has logged in with its socket open (or --login-timeout passed);
then they start within 8 s (or one paced loop), and after --warmup seconds the clock runs for
--duration seconds; only requests sent inside that window count. Printed:
the logins and socket connections; per endpoint count, requests/s, p50, p99 and failures; the
socket delays and message count; the CPU each part used over the window (Daphne, Celery,
Locust, this run's PostgreSQL backends, the rest of the machine); and PASS/FAIL against the
targets: p99 <= 300 ms for every page load and for launch and stop, launch + stop >= 50
requests/s. The exit code is 0 on PASS, 1 on FAIL, 2 when the run broke.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.harness import (
    POSTGRES_SERVER_URL,
    REDIS_SERVER_URL,
    ROOT,
    CpuMeter,
    Resources,
    percentile,
    postgres_create_database,
    postgres_drop_database,
    raise_keyboard_interrupt_on_sigterm,
    redis_claim_database,
    redis_release_database,
    reference_loop_ms,
    run_id,
    write_json,
)

INSTANCES_PER_SERVER = 128  # 8 cards x 16 small (5 %, 4 GiB) instances
PAGE_P99_TARGET_MS = 300.0
LAUNCH_STOP_RPS_TARGET = 50.0
DEFAULT_RATE = 60.0  # launch + stop requests/s aimed at: the target and a margin, so the window's edges cannot decide it
LOCUSTFILE = ROOT / "bench" / "locustfile.py"
# Lines the locustfile prints for the person watching; everything else Locust says goes to its log.
PROGRESS_PREFIX = "load: "
# Lines that tell bench.load when the window opens and closes (it measures CPU use over it).
MARK_PREFIX = "load-mark: "

# Endpoint names, shared with the locustfile. The kind says which target applies.
LOGIN_FORM = "GET /accounts/login/"
LOGIN_POST = "POST /accounts/login/"
DASHBOARD = "GET /"
LAUNCH = "POST /sessions/launch/"
STOP = "POST /sessions/<id>/stop/"
COURSE_PAGE = "GET /courses/<id>/"
TEACH = "GET /teach/"
OPS = "GET /ops/"
WS_CONNECT = "connect /ws/sessions/"
WS_LAUNCH = "launch -> socket"
WS_STOP = "stop -> socket"
WS_RUNNING = "launch -> running"
PAGES = (DASHBOARD, COURSE_PAGE, TEACH, OPS)
ACTIONS = (LAUNCH, STOP)
LOGINS = (LOGIN_FORM, LOGIN_POST)

QUICK = {"students": 26, "instructors": 3, "operators": 1, "courses": 2, "duration": 20.0, "warmup": 10.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--students", type=int, default=300, help="students, default 300")
    parser.add_argument("--instructors", type=int, default=20, help="instructors, default 20 (two per course)")
    parser.add_argument("--operators", type=int, default=2, help="operators on the cluster page, default 2")
    parser.add_argument("--courses", type=int, default=10, help="courses the students are spread over, default 10")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured, default 60")
    parser.add_argument(
        "--warmup",
        type=float,
        default=15.0,
        help="seconds of work before the window opens, default 15 (users start within 8 s or one paced loop)",
    )
    parser.add_argument("--spawn-rate", type=float, default=10.0, help="users started per second, default 10")
    parser.add_argument(
        "--login-concurrency",
        type=int,
        default=4,
        metavar="N",
        help="logins under way at once, default 4: each hashes a password (~0.3 s of CPU) while it holds one of Daphne's "
        "10 pooled database connections, and 300 at once make every other request wait for the pool",
    )
    parser.add_argument(
        "--login-timeout",
        type=float,
        default=420.0,
        help="seconds from the first login until the window opens anyway, default 420 (the report says who was not ready)",
    )
    parser.add_argument("--think", default="1,3", help="a student's pause between steps, MIN,MAX seconds, default 1,3")
    parser.add_argument(
        "--rate",
        type=float,
        default=DEFAULT_RATE,
        metavar="R",
        help=f"launch + stop requests/s the students aim at together, default {DEFAULT_RATE:g} (the target, 50, and a fifth): "
        "each student starts a loop every 2 x students / R seconds (Locust's constant_pacing), or at once when the "
        "last one took longer; 0: no pacing, every student loops as fast as its think times and the portal let it "
        "(the portal's saturation point, where every queue is full)",
    )
    parser.add_argument("--start-delay", type=float, default=0.5, help="the simulator's start time in seconds, default 0.5")
    parser.add_argument(
        "--web-processes",
        type=int,
        default=os.cpu_count() or 1,
        help="Daphne processes accepting on one listening socket, default one per core "
        f"({os.cpu_count() or 1} here): one process uses at most one core",
    )
    parser.add_argument("--workers", type=int, default=1, help="Celery worker processes, default 1")
    parser.add_argument("--concurrency", type=int, default=4, help="prefork children per worker, default 4")
    parser.add_argument(
        "--db-connection-limit",
        type=int,
        default=80,
        metavar="N",
        help="connections the run's database role may open, default 80 (PostgreSQL is shared with other work)",
    )
    parser.add_argument("--quick", action="store_true", help="26 students, 3 instructors, 1 operator; 10 s warm-up, 20 s")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temp dir with the services' and Locust's logs")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == parser.get_default(name):
                setattr(args, name, value)
    try:
        args.think = think_range(args.think)
    except ValueError as exc:
        parser.error(f"--think: {exc}")
    counts = (args.students, args.instructors, args.courses, args.web_processes, args.workers, args.concurrency)
    if min(*counts, args.login_concurrency) < 1:
        parser.error(
            "--students, --instructors, --courses, --web-processes, --workers, --concurrency and --login-concurrency must be >= 1"
        )
    if args.operators < 0:
        parser.error("--operators must be >= 0")
    if not args.rate >= 0 or math.isinf(args.rate):
        parser.error(f"--rate must be a number of requests/s >= 0 (0: no pacing), got {args.rate:g}")
    if args.duration <= 0 or args.spawn_rate <= 0 or args.login_timeout <= 0 or args.warmup < 0:
        parser.error("--duration, --spawn-rate and --login-timeout must be > 0, --warmup >= 0")
    args.web_conn_max_age = None  # bench.classstart.start_services reads it
    return args


def think_range(text: str) -> tuple[float, float]:
    """``"1,3"`` -> ``(1.0, 3.0)``; one number means a fixed pause."""
    parts = [float(p) for p in text.split(",") if p.strip()]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or parts[0] < 0 or parts[1] < parts[0]:
        raise ValueError(f"expected MIN,MAX seconds with 0 <= MIN <= MAX, got {text!r}")
    return parts[0], parts[1]


def student_pace(students: int, rate: float) -> float | None:
    """Seconds between the starts of one student's loops so that all together send ``rate`` launch +
    stop requests/s (each loop sends one of each); None for ``rate`` 0 (no pacing)."""
    return 2 * students / rate if rate else None


def pacing_text(args: argparse.Namespace) -> str:
    pace = student_pace(args.students, args.rate)
    think = f"think {args.think[0]:g}-{args.think[1]:g} s"
    if pace is None:
        return f"{think}, no pacing (as fast as each student goes)"
    return f"{think}, a student's loop every {pace:.1f} s (aiming at {args.rate:g} launch + stop requests/s)"


# --- pages -----------------------------------------------------------------------------------------


def csrf_token_of(page: str) -> str:
    """The CSRF token of the first form on a page (``{% csrf_token %}``)."""
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    if not found:
        raise ValueError("no csrfmiddlewaretoken on the page")
    return html.unescape(found.group(1))


def launch_forms_of(page: str) -> list[tuple[int, int]]:
    """``(course, template)`` of every Launch form on the dashboard, in page order."""
    return [
        (int(course), int(template))
        for course, template in re.findall(
            r'<input type="hidden" name="course" value="(\d+)"><input type="hidden" name="template" value="(\d+)">', page
        )
    ]


# --- results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One request or socket delay as the locustfile recorded it."""

    kind: str  # the Locust request type: GET, POST or WS
    name: str
    start: float  # time.time() when it was sent
    ms: float
    ok: bool
    status: int = 0  # HTTP status, 0 for a socket delay or a request that got no answer


@dataclass
class Results:
    """What the locustfile wrote: the measured window, every sample, socket and login facts."""

    window: tuple[float, float] | None
    samples: list[Sample]
    users: dict[str, int]
    logged_in: int
    login_failed: int
    login_seconds: float | None  # from Locust's start until every user was ready
    ready: int  # users logged in with their socket open when the window opened
    ws_messages: int
    ws_missed: dict[str, int]
    stopped_before_running: int = 0  # launched in the window and stopped before the socket showed it running
    errors: dict[str, int] = field(default_factory=dict)


def results_read(path: Path) -> Results:
    """Parse the locustfile's JSON (samples as ``[kind, name, start, ms, ok, status]`` rows)."""
    data = json.loads(path.read_text())
    window = tuple(data["window"]) if data.get("window") else None
    return Results(
        window=window,
        samples=[
            Sample(kind, name, float(start), float(ms), bool(ok), int(status))
            for kind, name, start, ms, ok, status in data["samples"]
        ],
        users={k: int(v) for k, v in data["users"].items()},
        logged_in=int(data["logged_in"]),
        login_failed=int(data["login_failed"]),
        login_seconds=data.get("login_seconds"),
        ready=int(data.get("ready", 0)),
        ws_messages=int(data.get("ws_messages", 0)),
        ws_missed={k: int(v) for k, v in data.get("ws_missed", {}).items()},
        stopped_before_running=int(data.get("stopped_before_running", 0)),
        errors={k: int(v) for k, v in data.get("errors", {}).items()},
    )


@dataclass(frozen=True)
class EndpointStats:
    name: str
    kind: str
    count: int
    rps: float
    p50_ms: float
    p99_ms: float
    failures: int
    statuses: dict[int, int]

    @property
    def missing(self) -> bool:
        """Every answer was 404: the endpoint does not exist in this build."""
        return self.count > 0 and self.statuses.get(404, 0) == self.count


def endpoint_stats(samples: Iterable[Sample], window: tuple[float, float] | None = None) -> list[EndpointStats]:
    """Per endpoint (kind and name): count, requests/s over the window, p50/p99 and failures.

    With a window, only samples sent inside ``[start, end)`` count and rates are per second of
    it; without one, over the span from the first to the last sample sent. Percentiles include
    failed requests (they took that long too) but not socket messages that never came.
    """
    samples = [s for s in samples if window is None or window[0] <= s.start < window[1]]
    if not samples:
        return []
    span = (window[1] - window[0]) if window else max(s.start for s in samples) - min(s.start for s in samples)
    grouped: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for sample in samples:
        grouped[(sample.kind, sample.name)].append(sample)
    stats = []
    for (kind, name), group in grouped.items():
        # A failed request took its time like any other; a socket message that never came has no delay.
        times = [s.ms for s in group if s.ok or kind != "WS"]
        statuses: dict[int, int] = defaultdict(int)
        for s in group:
            statuses[s.status] += 1
        stats.append(
            EndpointStats(
                name=name,
                kind=kind,
                count=len(group),
                rps=len(group) / span if span > 0 else math.nan,
                p50_ms=percentile(times, 50),
                p99_ms=percentile(times, 99),
                failures=sum(1 for s in group if not s.ok),
                statuses=dict(sorted(statuses.items())),
            )
        )
    return sorted(stats, key=lambda s: (s.kind == "WS", s.name not in LOGINS, s.name))


def total_rps(stats: Sequence[EndpointStats], *, names: Iterable[str] | None = None) -> float:
    """Requests/s of the HTTP endpoints (or of ``names`` only); socket delays are not requests."""
    chosen = set(names) if names is not None else None
    return sum(s.rps for s in stats if s.kind != "WS" and (chosen is None or s.name in chosen))


@dataclass(frozen=True)
class Check:
    what: str
    passed: bool
    detail: str


def verdict(stats: Sequence[EndpointStats]) -> list[Check]:
    """The targets: p99 <= 300 ms for each page load and for launch and stop, launch + stop >= 50 requests/s.

    An endpoint that answered nothing but 404 is missing, not failing; one never requested fails.
    """
    by_name = {s.name: s for s in stats if s.kind != "WS"}
    checks = []
    for name in (*PAGES, *ACTIONS):
        s = by_name.get(name)
        if s is None:
            checks.append(Check(f"{name} p99 <= {PAGE_P99_TARGET_MS:.0f} ms", False, "no request in the window"))
        elif s.missing:
            checks.append(
                Check(f"{name} p99 <= {PAGE_P99_TARGET_MS:.0f} ms", True, "missing: answered 404 in this build, not counted")
            )
        else:
            ok = s.p99_ms <= PAGE_P99_TARGET_MS and s.failures == 0
            detail = f"p99 {s.p99_ms:.0f} ms"
            if s.p99_ms > PAGE_P99_TARGET_MS:
                detail += f", {s.p99_ms / PAGE_P99_TARGET_MS:.1f}x the target"
            if s.failures:
                detail += f", {s.failures} failed"
            checks.append(Check(f"{name} p99 <= {PAGE_P99_TARGET_MS:.0f} ms", ok, detail))
    rate = total_rps(stats, names=ACTIONS)
    detail = f"{rate:.1f} requests/s"
    if rate < LAUNCH_STOP_RPS_TARGET:
        detail += f", {LAUNCH_STOP_RPS_TARGET - rate:.1f} short ({rate / LAUNCH_STOP_RPS_TARGET:.0%} of the target)"
    checks.append(Check(f"launch + stop >= {LAUNCH_STOP_RPS_TARGET:.0f} requests/s", rate >= LAUNCH_STOP_RPS_TARGET, detail))
    return checks


def fmt_ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}"


def endpoint_table(stats: Sequence[EndpointStats]) -> list[str]:
    width = max([len(s.name) for s in stats] + [8])
    lines = [f"    {'endpoint':<{width}}  {'count':>6}  {'req/s':>6}  {'p50 ms':>7}  {'p99 ms':>7}  {'failed':>6}  statuses"]
    for s in stats:
        statuses = ", ".join(f"{code or 'none'}: {n}" for code, n in s.statuses.items())
        note = "  (missing in this build)" if s.missing else ""
        lines.append(
            f"    {s.name:<{width}}  {s.count:>6}  {s.rps:>6.1f}  {fmt_ms(s.p50_ms):>7}  {fmt_ms(s.p99_ms):>7}  "
            f"{s.failures:>6}  {statuses}{note}"
        )
    return lines


def summarise(results: Results) -> dict:
    """Every figure of a run, from the locustfile's results: the report prints this, --json writes it."""
    window = results.window
    measured = [s for s in results.samples if s.kind != "WS" and s.name not in LOGINS]
    stats = endpoint_stats(measured, window)
    sockets = endpoint_stats([s for s in results.samples if s.kind == "WS"], window)
    # Logins and socket connects over the whole run: most happen before the window opens.
    logins = endpoint_stats([s for s in results.samples if s.name in (*LOGINS, WS_CONNECT)])
    checks = verdict(stats) if window else []
    return {
        "window_seconds": (window[1] - window[0]) if window else None,
        "users": results.users,
        "logged_in": results.logged_in,
        "login_failed": results.login_failed,
        "login_seconds": results.login_seconds,
        "ready": results.ready,
        "endpoints": [asdict(s) for s in stats],
        "sockets": [asdict(s) for s in sockets],
        "logins": [asdict(s) for s in logins],
        "ws_messages": results.ws_messages,
        "ws_missed": results.ws_missed,
        "stopped_before_running": results.stopped_before_running,
        "errors": results.errors,
        "total_rps": total_rps(stats),
        "launch_stop_rps": total_rps(stats, names=ACTIONS),
        "checks": [asdict(c) for c in checks],
        "passed": bool(checks) and all(c.passed for c in checks),
    }


def report(summary: dict, args: argparse.Namespace) -> None:
    def stats_of(key: str) -> list[EndpointStats]:
        return [EndpointStats(**row) for row in summary[key]]

    users = summary["users"]
    print(
        f"load on the portal: {users.get('Student', 0)} students, {users.get('Instructor', 0)} instructors, "
        f"{users.get('Operator', 0)} operators; {args.web_processes} Daphne process(es), {args.workers} Celery worker(s) x "
        f"{args.concurrency} (prefork), simulator start {args.start_delay:g} s, {pacing_text(args)}"
    )
    login = summary["login_seconds"]
    print(
        f"  logins: {summary['logged_in']} of {sum(users.values())} logged in"
        + (f", {summary['login_failed']} failed" if summary["login_failed"] else "")
        + (f"; {summary['ready']} ready (socket open) after {login:.0f} s" if login is not None else "")
        + " (reported apart: each hashes a password)"
    )
    for line in endpoint_table(stats_of("logins")):
        print(line)
    if summary["window_seconds"] is None:
        print("  NO measured window: Locust ended before the window opened")
        return
    print(f"  measured window: {summary['window_seconds']:.1f} s, requests sent inside it:")
    for line in endpoint_table(stats_of("endpoints")):
        print(line)
    print(f"  total: {summary['total_rps']:.1f} requests/s; launch + stop: {summary['launch_stop_rps']:.1f} requests/s")
    print("  socket (time from sending the request to the message on the student's /ws/sessions/):")
    for line in endpoint_table(stats_of("sockets")):
        print(line)
    missed = ", ".join(f"{name}: {n}" for name, n in sorted(summary["ws_missed"].items()) if n) or "none"
    print(
        f"  socket messages received in the window: {summary['ws_messages']}; expected messages not seen in time "
        f"(10 s after a launch or a stop, 30 s for the end; the student goes on without them): {missed}"
    )
    print(
        f"  launches in the window stopped before their lab was running: {summary['stopped_before_running']} "
        "(launch -> running counts only the others)"
    )
    if summary["errors"]:
        print("  errors in the users' code: " + ", ".join(f"{k} x {n}" for k, n in sorted(summary["errors"].items())))
    if summary.get("cpu_percent_of_one_core"):
        cores = os.cpu_count() or 1
        shares = summary["cpu_percent_of_one_core"]
        print(f"  CPU over the window, % of one core ({cores} cores = {100 * cores} %):")
        for name, value in shares.items():
            print(f"    {name}: {value:.0f} %")
    print("  targets:")
    for check in summary["checks"]:
        print(f"    {'PASS' if check['passed'] else 'FAIL'}  {check['what']}: {check['detail']}")
    print(f"  {'PASS' if summary['passed'] else 'FAIL'}")


# --- set-up ------------------------------------------------------------------------------------------


def build_world(*, students: int, instructors: int, operators: int, courses: int, servers: int) -> dict:
    """Nodes, courses each with a quota for all its students at once, the accounts; the locustfile's config."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from bench.classstart import PASSWORD
    from labs.models import Card, Course, CourseQuota, Enrollment, Institution, InstitutionRole, LabTemplate, Node

    institution = Institution.objects.create(name="Load University", slug="load")
    for s in range(servers):
        node = Node.objects.create(name=f"npu-{s + 1:03d}")
        Card.objects.bulk_create(
            Card(node=node, index=i, die_id=f"{node.name}-die-{i}", chip_type="Ascend910B", memory_mib=64 * 1024)
            for i in range(8)
        )
    template = LabTemplate.objects.create(
        institution=institution, name="small", slug="small", image="jupyter/base:latest", core_percent=5, memory_mib=4096
    )
    course_rows = []
    for c in range(courses):
        size = len(range(c, students, courses))  # the students dealt round-robin
        course = Course.objects.create(
            institution=institution, code=f"LOAD{c + 1:02d}", title=f"Load course {c + 1}", term="load"
        )
        CourseQuota.objects.create(
            course=course,
            core_percent=5 * max(size, 1),
            memory_mib=4096 * max(size, 1),
            instance_count=max(size, 1),
            sessions_per_student=1,
            max_session_minutes=180,
        )
        course.templates.add(template)
        course_rows.append(course)
    password = make_password(PASSWORD)  # one hash for all: hashing each would only cost set-up time
    User = get_user_model()
    student_users = User.objects.bulk_create(
        User(username=f"load-student{i + 1:04d}", password=password) for i in range(students)
    )
    teacher_users = User.objects.bulk_create(
        User(username=f"load-instructor{i + 1:03d}", password=password) for i in range(instructors)
    )
    operator_users = User.objects.bulk_create(
        User(username=f"load-operator{i + 1:02d}", password=password, is_staff=True) for i in range(operators)
    )
    Enrollment.objects.bulk_create(
        [Enrollment(user=u, course=course_rows[i % courses], role=Enrollment.Role.STUDENT) for i, u in enumerate(student_users)]
        + [
            Enrollment(user=u, course=course_rows[i % courses], role=Enrollment.Role.INSTRUCTOR)
            for i, u in enumerate(teacher_users)
        ]
    )
    InstitutionRole.objects.bulk_create(
        InstitutionRole(user=u, institution=institution, role=InstitutionRole.Role.OPERATOR) for u in operator_users
    )
    return {
        "password": PASSWORD,
        "students": [u.username for u in student_users],
        "instructors": [[u.username, course_rows[i % courses].pk] for i, u in enumerate(teacher_users)],
        "operators": [u.username for u in operator_users],
    }


def locust_command(*, config_path: Path, base_url: str, users: int, spawn_rate: float, run_time: float) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "-u", str(users), "-r", f"{spawn_rate:g}", "-t", f"{math.ceil(run_time)}s",
        "--host", base_url, "--only-summary", "--stop-timeout", "10", "--loglevel", "WARNING",
    ]  # fmt: skip


def run_locust(
    command: list[str], *, env: dict[str, str], log_path: Path, timeout: float, on_mark: Callable[[str, int], None]
) -> int:
    """Run Locust, echoing the locustfile's progress lines and passing its marks to ``on_mark``; the rest
    (Locust's own summary, warnings) goes to ``log_path``. Killed after ``timeout`` seconds."""
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        watchdog = threading.Timer(timeout, child.kill)
        watchdog.start()
        try:
            for line in child.stdout:
                if line.startswith(PROGRESS_PREFIX):
                    print(f"  {line[len(PROGRESS_PREFIX) :].rstrip()}", flush=True)
                elif line.startswith(MARK_PREFIX):
                    on_mark(line[len(MARK_PREFIX) :].strip(), child.pid)
                log.write(line)
            child.wait()
        finally:
            watchdog.cancel()
            if child.poll() is None:
                child.kill()
                child.wait()
    return child.returncode


# --- where the CPU goes ------------------------------------------------------------------------------



def run(args: argparse.Namespace) -> dict:
    import random

    from bench.classstart import portal_env, start_services

    rid = run_id()
    db_name = f"bench_load_{rid}"
    res = Resources(keep_temp=args.keep_logs)
    try:
        temp = res.make_temp_dir(f"npu-lab-bench-load-{rid}-")
        database_url = postgres_create_database(POSTGRES_SERVER_URL, db_name, connection_limit=args.db_connection_limit)
        res.on_close(f"drop database {db_name}", lambda: postgres_drop_database(POSTGRES_SERVER_URL, db_name))
        owner = f"bench-load-{rid}"
        redis_url = redis_claim_database(REDIS_SERVER_URL, owner)
        res.on_close(f"release {redis_url}", lambda: redis_release_database(redis_url, owner))
        (temp / "var").mkdir()
        env = portal_env(
            database_url=database_url,
            redis_url=redis_url,
            var_dir=temp / "var",
            start_delay=args.start_delay,
            channels_prefix=f"bench-{rid}",
        )
        os.environ.update(env)

        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        res.on_close("close this process's database connections", connections.close_all)
        setup_started = time.monotonic()
        call_command("migrate", interactive=False, verbosity=0)
        servers = max(1, math.ceil(args.students / INSTANCES_PER_SERVER))
        world = build_world(
            students=args.students, instructors=args.instructors, operators=args.operators, courses=args.courses, servers=servers
        )
        connections.close_all()  # this process is idle from here on: give its connections back
        base_url = start_services(res, env, args, rid, web_processes=args.web_processes)
        print(f"set-up (migrate, data, services): {time.monotonic() - setup_started:.1f} s; {base_url}", flush=True)
        speed_before = reference_loop_ms()
        print(f"reference loop before the run: {speed_before:.0f} ms of CPU (bench.harness.reference_loop_ms)", flush=True)

        results_path = temp / "results.json"
        config = {
            **world,
            "duration": args.duration,
            "warmup": args.warmup,
            "login_timeout": args.login_timeout,
            "think": list(args.think),
            "pace": student_pace(args.students, args.rate),
            "login_concurrency": args.login_concurrency,
            "results": str(results_path),
            "seed": random.randrange(2**32),
        }
        config_path = temp / "load-config.json"
        config_path.write_text(json.dumps(config))
        users = args.students + args.instructors + args.operators
        # Locust's own bound: every login, the window and a margin; the locustfile normally ends sooner.
        run_time = args.login_timeout + args.warmup + args.duration + 30
        command = locust_command(
            config_path=config_path, base_url=base_url, users=users, spawn_rate=args.spawn_rate, run_time=run_time
        )
        locust_env = {**os.environ, "LOAD_CONFIG": str(config_path), "PYTHONPATH": str(ROOT)}
        print(
            f"locust: {users} users at {args.spawn_rate:g}/s, {args.login_concurrency} logins at a time; "
            "the clock starts once all are logged in",
            flush=True,
        )
        by_name = {s.name: s.process.pid for s in res.services}
        meter = CpuMeter(
            {
                "Daphne": [pid for name, pid in by_name.items() if name.startswith("daphne")],
                "Celery workers": [pid for name, pid in by_name.items() if name.startswith("worker")],
                "Celery beat": [by_name["beat"]],
            },
            {
                "PostgreSQL (this run's backends)": lambda command: f" {db_name} {db_name} " in command,
                "Redis server (shared with other work)": lambda command: command.startswith("redis-server"),
            },
        )

        def on_mark(mark: str, locust_pid: int) -> None:
            meter.groups["Locust"] = [locust_pid]
            if mark == "window-open":
                meter.start()
            elif mark == "window-closed":
                meter.stop()

        code = run_locust(command, env=locust_env, log_path=temp / "locust.log", timeout=run_time + 60, on_mark=on_mark)
        if not results_path.exists():
            tail = "\n".join((temp / "locust.log").read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"Locust exited with code {code} and wrote no results:\n{tail}")
        summary = summarise(results_read(results_path))
        summary["cpu_percent_of_one_core"] = meter.shares
        summary["reference_loop_ms"] = [speed_before, reference_loop_ms()]
        summary["args"] = {k: v for k, v in vars(args).items() if k not in {"json", "keep_logs", "web_conn_max_age"}}
        summary["sessions_by_state"] = sessions_by_state()
        report(summary, args)
        print(f"  sessions in the database at the end, by state: {summary['sessions_by_state']}")
        print(
            "  reference loop before and after the run: {:.0f} and {:.0f} ms of CPU (higher: a slower machine,"
            " and every figure above with it)".format(*summary["reference_loop_ms"])
        )
        return summary
    finally:
        res.close()


def sessions_by_state() -> dict[str, int]:
    from django.db.models import Count

    from labs.models import LabSession

    return dict(LabSession.objects.values_list("state").annotate(n=Count("id")).order_by("state"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    raise_keyboard_interrupt_on_sigterm()
    began = time.monotonic()
    try:
        summary = run(args)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped and removed", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"load: {exc}", file=sys.stderr)
        return 2
    write_json(args.json, summary)
    print(f"bench.load took {time.monotonic() - began:.0f} s")
    if summary["window_seconds"] is None:
        return 2
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
