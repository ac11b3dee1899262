"""The class start: its knobs, the launches fired and retried, the labs waited for and stopped, the figures."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import threading
import time
from collections import Counter
from urllib.parse import urlencode

from bench.classstart.portal import (
    build_class,
    login_cookies_direct,
    login_cookies_http,
    portal_env,
    start_cluster,
    start_services,
)
from bench.classstart.report import report
from bench.harness import (
    POSTGRES_SERVER_URL,
    REDIS_SERVER_URL,
    CpuMeter,
    Fired,
    Resources,
    fire_at_once,
    http_request,
    percentile,
    postgres_create_database,
    postgres_drop_database,
    redis_claim_database,
    redis_release_database,
    retry_until_accepted,
    run_id,
    status_counts,
)
from bench.poll import POLL_PERIOD, PollFailed, machine_state, poll_until_running, portal_fetch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.classstart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=128, help="students launching at once (K), default 128")
    parser.add_argument("--servers", type=int, default=1, help="nodes of 8 x 910B 64 GiB, default 1 (128 small instances each)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes, default 2")
    parser.add_argument("--concurrency", type=int, default=4, help="prefork children per worker, default 4")
    parser.add_argument(
        "--driver",
        choices=("simulator", "kubernetes"),
        default="simulator",
        help="simulator: the simulator driver (default); kubernetes: the Kubernetes driver against a fresh local "
        "control plane (python -m labs.devcluster) with --servers fake FlexNPU nodes, deploy/ applied; the class is "
        "then stopped too, until the API server holds nothing of it",
    )
    parser.add_argument(
        "--start-delay", type=float, default=1.0, help="seconds a lab takes to start (simulator, or node simulator), default 1.0"
    )
    parser.add_argument(
        "--web-processes",
        type=int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="Daphne processes, default one per core (%(default)s here): one Daphne runs Python on one core, and deploy/ "
        "adds cores by adding web replicas (deploy/base: 2) or, on a machine of its own, one process per core",
    )
    parser.add_argument(
        "--web-listen",
        choices=("ports", "socket"),
        default="ports",
        help="ports (default): each web process on a port of its own, the client sending each request to the next, as a "
        "Kubernetes Service spreads connections over the web pods; socket: all accept on one listening socket (supervisor's "
        "fcgi-program on one machine), the kernel handing each connection to whichever accepts first",
    )
    parser.add_argument("--threads", type=int, default=32, help="client threads sending the launches, default 32")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds from the first launch to give up, default 180")
    parser.add_argument(
        "--web-conn-max-age",
        type=int,
        metavar="SECONDS",
        help="Daphne's CONN_MAX_AGE (as ?conn_max_age= on its DATABASE_URL), for comparing with portals older than the "
        "connection pool; the portal now always sets CONN_MAX_AGE 0 with a pool per process, so it has no effect there",
    )
    parser.add_argument(
        "--poll-period", type=float, default=POLL_PERIOD, help=f"seconds between polls of the sessions, default {POLL_PERIOD:g}"
    )
    parser.add_argument("--http-login", action="store_true", help="log every student in through the login page (slow)")
    parser.add_argument(
        "--db-connection-limit",
        type=int,
        default=80,
        metavar="N",
        help="connections the run's database role may open, default 80: the portal cannot exhaust a PostgreSQL "
        "(max_connections 100 by default) that other work shares; a portal on a server of its own would have ~97",
    )
    parser.add_argument("--no-retry", action="store_true", help="do not press Launch again after a server error")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temp dir with the services' logs")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH (used by bench.side_by_side)")
    args = parser.parse_args(argv)
    if min(args.launches, args.servers, args.workers, args.concurrency, args.threads, args.web_processes) < 1:
        parser.error("--launches, --servers, --workers, --concurrency, --threads and --web-processes must be >= 1")
    if args.poll_period <= 0:
        parser.error("--poll-period must be > 0")
    return args


SETTLED = {"running", "failed", "stopped"}


def api_token(institution) -> str:
    """A token the portal issues (as ``manage.py api_token create`` does) to read the institution's sessions."""
    from api.services import token_create

    _token, secret = token_create(institution=institution, name="bench", scopes=["sessions:read"], expires_at=None)
    return secret


DAPHNE, WORKERS, BEAT, POSTGRESQL = "Daphne", "Celery workers", "Celery beat", "PostgreSQL (this run's backends)"
# The portal's own processes, whose CPU per session is the measure: group -> the meter's groups in it.
PORTAL_CPU = {"Daphne": (DAPHNE,), "Celery (workers and beat)": (WORKERS, BEAT), POSTGRESQL: (POSTGRESQL,)}


def cpu_meter(res: Resources, cluster, db_name: str) -> CpuMeter:
    """The CPU of the run's processes from the first launch to the last lab running: where the time went.
    The backends of the run's database are read every 0.05 s as well: each Celery prefork child
    connects per task, and a backend that ended before the last reading would not be counted."""
    groups = {
        DAPHNE: [s.process.pid for s in res.services if s.name.startswith("daphne")],
        WORKERS: [s.process.pid for s in res.services if s.name.startswith("worker")],
        BEAT: [s.process.pid for s in res.services if s.name == "beat"],
    }
    if cluster is not None:
        groups.update({name: [pid] for name, pid in cluster.pids().items()})
    match = {
        POSTGRESQL: lambda command: f" {db_name} " in command,
        "Redis server (shared with other work)": lambda command: command.startswith("redis-server"),
    }
    # This process (the node simulator, the client threads, the polling) is in "everything else":
    # a group would count its children, the services above, twice.
    return CpuMeter(groups, match, sample_period=0.05)


def portal_cpu_ms(ms: dict[str, float], launches: int) -> dict[str, float]:
    """CPU milliseconds per session of each of the portal's groups and of all three ("total")."""
    per_session = {name: sum(ms.get(group, 0.0) for group in groups) / launches for name, groups in PORTAL_CPU.items()}
    per_session["total"] = sum(per_session.values())
    return per_session


def poll_cpu_ms(res: Resources, cluster, db_name: str, fetch, polls: int = 10) -> float:
    """What one poll of the class costs Daphne and PostgreSQL in CPU ms (``polls`` polls made after
    the run, one after another, averaged: a clock tick is 10 ms): the bench's polling is in the CPU
    per session, and this says how much of it is the bench's looking rather than the class start."""
    meter = cpu_meter(res, cluster, db_name)
    meter.start()
    done = 0
    for _ in range(polls):
        with contextlib.suppress(PollFailed):
            fetch()
            done += 1
    meter.stop()
    return (meter.ms[DAPHNE] + meter.ms[POSTGRESQL]) / done if done else math.nan


class ConnectionSampler(threading.Thread):
    """Counts the connections to the run's database every 0.1 s (as the server's superuser: not within the run's limit),
    and those opened since it started (each costs both sides a password exchange and the server a new process)."""

    def __init__(self, server_url: str, db_name: str) -> None:
        super().__init__(daemon=True)
        import psycopg

        self.db_name = db_name
        self.conn = psycopg.connect(f"{server_url.rstrip('/')}/postgres", autocommit=True)
        self.max_connections = int(self.conn.execute("SHOW max_connections").fetchone()[0])
        self.peak = 0
        self.started_at = self.conn.execute("SELECT now()").fetchone()[0]
        self.opened: set[int] = set()
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            rows = self.conn.execute(
                "SELECT pid, backend_start > %s FROM pg_stat_activity WHERE datname = %s", [self.started_at, self.db_name]
            ).fetchall()
            self.peak = max(self.peak, len(rows))
            self.opened.update(pid for pid, new in rows if new)
            self.stopping.wait(0.1)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)
        self.conn.close()


def connections_settled(server_url: str, db_name: str, *, quiet: float = 1.0, timeout: float = 20.0) -> int:
    """Wait until no connection to the run's database has been opened for ``quiet`` seconds (the web
    processes' pools filling in the background), at most ``timeout``; how many are open then."""
    import psycopg

    with psycopg.connect(f"{server_url.rstrip('/')}/postgres", autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while True:
            count, newest_age = conn.execute(
                "SELECT count(*), extract(epoch FROM now() - max(backend_start)) FROM pg_stat_activity WHERE datname = %s",
                [db_name],
            ).fetchone()
            if (newest_age is not None and newest_age >= quiet) or time.monotonic() > deadline:
                return count
            time.sleep(0.1)


def run(args: argparse.Namespace) -> dict:
    rid = run_id()
    db_name = f"bench_classstart_{rid}"
    res = Resources(keep_temp=args.keep_logs)
    figures: dict = {"bench": "portal", "launches": args.launches, "servers": args.servers, "poll_period": args.poll_period}
    try:
        temp = res.make_temp_dir(f"npu-lab-bench-classstart-{rid}-")
        figures["machine_before"] = machine_state(temp)
        database_url = postgres_create_database(POSTGRES_SERVER_URL, db_name, connection_limit=args.db_connection_limit)
        res.on_close(f"drop database {db_name}", lambda: postgres_drop_database(POSTGRES_SERVER_URL, db_name))
        owner = f"bench-classstart-{rid}"
        redis_url = redis_claim_database(REDIS_SERVER_URL, owner)
        res.on_close(f"release {redis_url}", lambda: redis_release_database(redis_url, owner))
        (temp / "var").mkdir()
        cluster, driver = start_cluster(res, temp, args) if args.driver == "kubernetes" else (None, None)
        env = portal_env(
            database_url=database_url,
            redis_url=redis_url,
            var_dir=temp / "var",
            start_delay=args.start_delay,
            channels_prefix=f"bench-{rid}",
            driver=driver,
        )
        # The poll of the sessions is 10 requests/s or more, as JupyterHub's is: the API's rate limit
        # per token (600/minute by default) would refuse it. JupyterHub limits none of its API.
        env["API_THROTTLE_RATE"] = "1000000/minute"
        os.environ.update(env)  # this process reads the same database (data, login sessions, polling)

        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        res.on_close("close this process's database connections", connections.close_all)
        setup_started = time.monotonic()
        call_command("migrate", interactive=False, verbosity=0)
        course, template, students = build_class(args.launches, args.servers)
        if cluster is not None:
            from labs.devcluster.portal import apply_course_manifests

            apply_course_manifests(cluster, course.code, profile="flexnpu")
        token = api_token(course.institution)
        urls = start_services(res, env, args, rid, web_processes=args.web_processes, own_ports=args.web_listen == "ports")
        base_url = urls[0]
        spread = itertools.cycle(urls)  # next(): the web process of the next connection, as a Service picks one
        if args.http_login:
            cookies = login_cookies_http(base_url, students, args.threads)
        else:
            cookies = login_cookies_direct(students)
        # One logged-in page view per web process, so a broken login shows up here and not as K failed launches.
        cookie, _ = cookies[students[0].pk]
        for url in urls:
            home = http_request("GET", f"{url}/", headers={"Cookie": cookie})
            if home.status != 200:
                raise RuntimeError(f"a logged-in student gets HTTP {home.status} for {url}/ (expected 200)")
        # That view opened each web process's pool: a portal between classes has its connections open
        # (deploy/ keeps the web pods' pools full), so the class start should not pay for opening them.
        figures["db_connections_before"] = connections_settled(POSTGRES_SERVER_URL, db_name)
        print(f"set-up (migrate, data, services, {args.launches} logins): {time.monotonic() - setup_started:.1f} s", flush=True)

        body = urlencode({"course": course.pk, "template": template.pk})

        def launch(user_pk: int):
            cookie, csrf = cookies[user_pk]
            headers = {
                "Cookie": cookie,
                "X-CSRFToken": csrf,
                "Accept": "application/json",
                "Content-Type": "application/x-www-form-urlencoded",
            }
            return lambda: http_request("POST", f"{next(spread)}/sessions/launch/", headers=headers, body=body)

        meter = cpu_meter(res, cluster, db_name)
        sampler = ConnectionSampler(POSTGRES_SERVER_URL, db_name)
        meter.start()
        fired = fire_at_once([(str(u.pk), launch(u.pk)) for u in students], threads=args.threads)
        started = min(f.sent_at for f in fired)
        submitted = max(f.done_at for f in fired) - started
        retried: list[Fired] = []
        retrier = threading.Thread(
            target=retry_until_accepted,
            args=(fired, lambda key: launch(int(key))),
            kwargs={
                # A server error or a broken connection: the student presses Launch again a second later.
                # (A 400 is a refusal, e.g. "you already have a session open": pressing again changes nothing.)
                "should_retry": lambda f: (f.status == 0 or f.status >= 500) and not args.no_retry,
                "delay": lambda f: 1.0,
                "deadline": started + args.timeout,
                "retried": retried,
            },
            daemon=True,
        )
        retrier.start()
        usernames = {u.username: u.pk for u in students}
        polled = poll_until_running(
            portal_fetch(urls, token, course.pk),
            set(usernames),
            deadline=started + args.timeout,
            period=args.poll_period,
            # every launch answered and every session settled, not all running: nothing can change any more
            settled=lambda seen: not retrier.is_alive() and set(seen.values()) <= SETTLED,
        )
        meter.stop()
        sampler.stop()
        retrier.join(timeout=1)
        poll_ms = poll_cpu_ms(res, cluster, db_name, portal_fetch(urls, token, course.pk))
        running_at = {usernames[name]: at for name, at in polled.running_at.items()}
        figures.update(collect(course, fired, retried, started, submitted, args.launches, running_at))
        figures.update(
            polls=polled.polls, failed_polls=polled.failed_polls, poll_p50=polled.poll_p50, poll_failure=polled.last_failure
        )
        figures["threads"] = args.threads
        figures["peak_db_connections"] = sampler.peak
        figures["db_connections_opened"] = len(sampler.opened)
        figures["cpu_percent_of_one_core"] = meter.shares
        figures["cpu_ms"] = meter.ms
        figures["cpu_ms_per_session"] = portal_cpu_ms(meter.ms, args.launches)
        figures["poll_cpu_ms"] = poll_ms
        figures["max_connections"] = sampler.max_connections
        figures["db_connection_limit"] = args.db_connection_limit
        if cluster is not None:
            figures.update(start_split(cluster, course))
        if cluster is not None and figures["time_to_all_running"] is not None:
            figures.update(stop_class(cluster, course, urls, token, cookies, args))
        figures["machine_after"] = machine_state(temp)
        report(figures, args)
        return figures
    finally:
        res.close()


def start_split(cluster, course) -> dict:
    """Where the labs' start went on the cluster, p50 per session: from the create being sent
    (``started_at``) to the node simulator seeing the pod bound to its node (the portal's creates
    and the scheduler), from there to its kubelet reporting it Ready (the start delay and the
    status patches), and from there to the portal calling it running (the controller's look)."""
    from labs.drivers.kubernetes import builders
    from labs.models import LabSession

    simulator = cluster.simulator
    to_bound, to_ready, to_seen = [], [], []
    for pk, code, started, running in LabSession.objects.filter(course=course).values_list(
        "pk", "course__code", "started_at", "running_at"
    ):
        key = f"{builders.namespace_name(code)}/{builders.pod_name(str(pk))}"
        bound, ready = simulator.bound_at.get(key), simulator.ready_at.get(key)
        if started is not None and bound is not None:
            to_bound.append(bound - started.timestamp())
        if bound is not None and ready is not None:
            to_ready.append(ready - bound)
        if ready is not None and running is not None:
            to_seen.append(running.timestamp() - ready)
    return {
        "started_to_bound_p50": percentile(to_bound, 50),
        "bound_to_ready_p50": percentile(to_ready, 50),
        "ready_to_running_p50": percentile(to_seen, 50),
    }


def stop_class(
    cluster, course, urls: list[str], token: str, cookies: dict[int, tuple[str, str]], args: argparse.Namespace
) -> dict:
    """Every student presses Stop at once; until every session is stopped (read through the API, as
    bench.jupyterhub reads the Hub's servers stopping) and the API server holds nothing of the class."""
    from labs.devcluster.portal import lab_objects_left
    from labs.drivers.kubernetes.builders import namespace_name
    from labs.models import Allocation, LabSession

    sessions = dict(LabSession.objects.filter(course=course).values_list("student_id", "pk"))
    spread = itertools.cycle(urls)

    def stop(user_pk: int):
        cookie, csrf = cookies[user_pk]
        headers = {"Cookie": cookie, "X-CSRFToken": csrf, "Accept": "application/json"}
        return lambda: http_request("POST", f"{next(spread)}/sessions/{sessions[user_pk]}/stop/", headers=headers)

    fired = fire_at_once([(str(pk), stop(pk)) for pk in sessions], threads=args.threads)
    started = min(f.sent_at for f in fired)
    deadline = started + args.timeout
    namespace = namespace_name(course.code, namespace_prefix="lab-")
    fetch = portal_fetch(urls, token, course.pk)
    stopped_after = left_after = None
    by_state: dict[str, int] = {}
    left: dict[str, list[str]] = {}
    while time.time() < deadline:
        if stopped_after is None:
            try:
                by_state = dict(Counter(fetch().values()))
            except PollFailed:
                by_state = {}
            if by_state.get("stopped", 0) == len(sessions):
                stopped_after = time.time() - started
        left = lab_objects_left(cluster.api, namespace)
        if stopped_after is not None and not left:
            left_after = time.time() - started
            break
        time.sleep(0.2)
    unreleased = Allocation.objects.filter(session__course=course, released_at__isnull=True).count()
    return {
        "stop_statuses": status_counts(fired),
        "time_to_all_stopped": stopped_after,
        "stopped_by_state": by_state,
        "time_to_nothing_left": left_after,
        "left_in_api_server": {kind: len(names) for kind, names in left.items()},
        "unreleased_allocations": unreleased,
    }


Stamps = tuple[float | None, float | None, float | None]


def class_end(events: list[Stamps], *, last_answered: float, last_seen: float | None) -> dict:
    """Where the time after the last launch's answer went: when the last session was admitted,
    its lab's create sent and it was running (the portal's timestamps), and seen running through the
    API (``last_seen``), each in seconds after ``last_answered``; and how many allocation passes
    admitted the class (sessions admitted at the same instant), the last of them with how many.

    ``events``: per session, epoch seconds admitted, create sent and running (each ``None`` when not yet)."""
    admitted = [a for a, _, _ in events if a is not None]
    sent = [s for _, s, _ in events if s is not None]
    running = [r for _, _, r in events if r is not None]

    def after(times: list[float]) -> float | None:
        return max(times) - last_answered if times else None

    passes = Counter(admitted)
    return {
        "end_admitted": after(admitted),
        "end_create_sent": after(sent),
        "end_running": after(running),
        "end_seen": None if last_seen is None else last_seen - last_answered,
        "admitting_passes": len(passes),
        "last_pass_admitted": passes[max(passes)] if passes else 0,
    }


def collect(course, fired, retried, started: float, submitted: float, launches: int, seen_running: dict[int, float]) -> dict:
    """The run's figures. ``seen_running``: student pk -> when the poll of the API first showed the
    session running; the times to running are from it. The split of the start (queued -> admitted
    -> running) is the portal's own timestamps, read from the database after the run."""
    from django.db.models import Count

    from labs.models import LabSession

    sent = {int(f.key): f.sent_at for f in fired}  # a retried launch counts from the first press
    fields = ("student_id", "created_at", "admitted_at", "started_at", "running_at")
    rows = [(s, c, a, r) for s, c, a, _, r in LabSession.objects.filter(course=course).values_list(*fields)]
    by_state = dict(LabSession.objects.filter(course=course).values_list("state").annotate(n=Count("id")).order_by())
    launch_to_running = [at - sent[pk] for pk, at in seen_running.items()]
    answered_in = [f.done_at - f.sent_at for f in fired]
    queued_to_admitted = [(a - c).total_seconds() for _, c, a, _ in rows if a is not None]
    admitted_to_running = [(r - a).total_seconds() for _, _, a, r in rows if a is not None and r is not None]
    starts = LabSession.objects.filter(course=course).values_list("admitted_at", "started_at", "running_at")
    admitted_to_started = [(s - a).total_seconds() for a, s, _ in starts if a is not None and s is not None]
    started_to_running = [(r - s).total_seconds() for _, s, r in starts if s is not None and r is not None]
    stamps: list[Stamps] = [tuple(None if at is None else at.timestamp() for at in row) for row in starts]
    running = len(seen_running)
    failures = Counter(
        session.reason for session in LabSession.objects.filter(course=course, state__in=("failed", "stopping", "stopped"))
    )
    last_running = max(seen_running.values(), default=None)
    return {
        **class_end(stamps, last_answered=max((f.done_at for f in fired), default=started), last_seen=last_running),
        "accepted": sum(1 for f in fired if f.status == 201),
        "sessions": len(rows),
        "running": running,
        "stuck": {state: n for state, n in by_state.items() if state != "running"},
        "running_in_database": by_state.get("running", 0),
        "failures": dict(failures.most_common(5)),
        "http_statuses": status_counts(fired),
        "retry_statuses": status_counts(retried) if retried else "",
        "submit_seconds": submitted,
        # How long a student's Launch waited for its answer (the first press).
        "post_p50": percentile(answered_in, 50),
        "post_p99": percentile(answered_in, 99),
        "time_to_all_running": (last_running - started) if running >= launches and last_running else None,
        "time_to_last_running": (last_running - started) if last_running else None,
        "launch_to_running_p50": percentile(launch_to_running, 50),
        "launch_to_running_p99": percentile(launch_to_running, 99),
        "queued_to_admitted_p50": percentile(queued_to_admitted, 50),
        "admitted_to_running_p50": percentile(admitted_to_running, 50),
        "admitted_to_started_p50": percentile(admitted_to_started, 50),
        "started_to_running_p50": percentile(started_to_running, 50),
    }
