"""What ``make load`` runs: its knobs, the endpoints it measures, and how a user reads a page."""

from __future__ import annotations

import argparse
import html
import math
import os
import re

from bench.harness import ROOT

INSTANCES_PER_SERVER = 128  # 8 cards x 16 small (5 %, 4 GiB) instances
PAGE_P99_TARGET_MS = 300.0
DEFAULT_RATE = 100.0  # launch + stop requests/s aimed at (issue 32: with its instructors and operators, on 2 cores)
RATE_MET = 0.95  # the achieved launch + stop rate must be at least this share of the rate aimed at
SATURATION_RAMP = 8.0  # seconds between dropping the pacing and measuring the saturation rate
# A student's think times in the saturation phase: short, so that 300 students offer far more than the
# portal serves (with 1-3 s they offer at most about 90 launch + stop requests/s, under the target itself).
SATURATION_THINK = (0.5, 1.0)
LOCUSTFILE = ROOT / "bench" / "locustfile.py"
# Lines the locustfile prints for the person watching; everything else Locust says goes to its log.
PROGRESS_PREFIX = "load: "
# Lines that tell bench.load when the window opens and closes (it measures CPU use over it).
MARK_PREFIX = "load-mark: "

# The response header in which bench.load.cpu sends the request thread's CPU, in microseconds.
CPU_HEADER = "X-Bench-Thread-Cpu-Us"

# Endpoint names, shared with the locustfile. The kind says which target applies.
LOGIN_FORM = "GET /accounts/login/"
LOGIN_POST = "POST /accounts/login/"
DASHBOARD = "GET /"
LAUNCH = "POST /sessions/launch/"
STOP = "POST /sessions/<id>/stop/"
COURSE_PAGE = "GET /courses/<id>/"
TEACH = "GET /teach/"
OPS = "GET /ops/"
FLOOR = "GET /bench/floor/ (trivial view)"
WS_CONNECT = "connect /ws/sessions/"
WS_LAUNCH = "launch -> socket"
WS_STOP = "stop -> socket"
WS_RUNNING = "launch -> running"
PAGES = (DASHBOARD, COURSE_PAGE, TEACH, OPS)
ACTIONS = (LAUNCH, STOP)
LOGINS = (LOGIN_FORM, LOGIN_POST)

QUICK = {"students": 26, "instructors": 3, "operators": 1, "courses": 2, "duration": 20.0, "warmup": 10.0, "saturation": 10.0}


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
        help=f"launch + stop requests/s the students aim at together, default {DEFAULT_RATE:g}; the run passes when it "
        f"achieves {RATE_MET * 100:.0f} %% of it (of {DEFAULT_RATE:g} with --rate 0): "
        "each student starts a loop every 2 x students / R seconds (Locust's constant_pacing), or at once when the "
        "last one took longer; 0: no pacing, every student loops as fast as its think times and the portal let it "
        "(the portal's saturation point, where every queue is full)",
    )
    parser.add_argument(
        "--saturation",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="after the paced window: drop the pacing, think 0.5-1 s, wait 8 s and measure SECONDS more, default 20 "
        "(0: no such phase); "
        "the launch + stop rate there is the portal's saturation rate (reported, not judged)",
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
    parser.add_argument(
        "--quick", action="store_true", help="26 students, 3 instructors, 1 operator; 10 s warm-up, 20 s paced, 10 s unpaced"
    )
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
    if args.duration <= 0 or args.spawn_rate <= 0 or args.login_timeout <= 0 or args.warmup < 0 or args.saturation < 0:
        parser.error("--duration, --spawn-rate and --login-timeout must be > 0, --warmup and --saturation >= 0")
    args.web_conn_max_age = None  # bench.classstart.portal.start_services reads it
    return args


def think_range(text: str) -> tuple[float, float]:
    """``"1,3"`` -> ``(1.0, 3.0)``; one number means a fixed pause."""
    parts = [float(p) for p in text.split(",") if p.strip()]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or parts[0] < 0 or parts[1] < parts[0]:
        raise ValueError(f"expected MIN,MAX seconds with 0 <= MIN <= MAX, got {text!r}")
    return parts[0], parts[1]


def target_rate(rate: float) -> float:
    """The launch + stop requests/s a run is judged against: the rate aimed at, or the default when unpaced."""
    return rate or DEFAULT_RATE


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
