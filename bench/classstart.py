"""Class start on the real portal: K students press Launch at once; how long until every lab runs?

    .venv/bin/python -m bench.classstart --launches 128

What runs, all on this machine and all real processes, each run with its own resources:
  - a new PostgreSQL database (bench_classstart_<run>, migrated here, dropped at the end) and a
    Redis database number of its own (claimed with SET NX like the test suite does, emptied and
    released at the end);
  - Daphne serving portal.asgi on a free port on 127.0.0.1, with DEBUG off and a generated SECRET_KEY;
  - --workers Celery worker processes (python -m celery -A portal worker, prefork, --concurrency
    each) and one Celery beat (python -m celery -A portal beat, schedule file in a temp dir);
  - the simulator cluster driver (LAB_DRIVER=labs.drivers.simulator.SimulatorDriver), whose
    instances come up --start-delay seconds after they are created (1 s by default). There is no
    NPU here: what is measured is the portal's own path, HTTP -> queued -> allocation pass ->
    admitted -> start task -> poll tasks -> running.

--driver kubernetes runs the same class on the Kubernetes driver instead: a fresh local control
plane (labs.devcluster: the real kube-apiserver, scheduler with its "volcano" profile,
controller-manager and etcd from `make controlplane`; a node simulator in this process plays
the kubelets, with --servers fake FlexNPU nodes whose pods come up --start-delay seconds after
they are bound), deploy/base applied, the course's namespace from `manage.py course_manifests`,
and the driver authenticated as the ServiceAccount deploy/ makes, giving each lab its pod,
Secret, Service and Ingress. After all run, every student presses Stop at once, and the run
waits until every session is stopped and the API server holds nothing of the class (pods,
secrets, services, ingresses); it fails if anything is left or an allocation is not released.

Data: --servers nodes of 8 x Ascend 910B with 64 GiB each, one course whose quota fits every
launch, K enrolled students, one "small" template (5 % AI Core, 4 GiB). One 8-card server takes
128 such instances, so launches beyond 128 x servers wait for room (and the run says so).

Before the clock starts every student is logged in: by default a Django session is written
straight into the database and its cookie used (cheap; --http-login logs in through the login
page instead, which costs a password hash per student). Then K POSTs to the student's Launch
endpoint (/sessions/launch/, the form the page submits, with CSRF token, Accept: application/json)
are queued at once on a pool of --threads threads, and the database is polled every 0.2 s until
every student's session is running, or --timeout seconds have passed (then it says how many are
stuck and in which state). A launch answered with a server error (5xx) or a broken connection is
pressed again 1 s later, as the student would (--no-retry: not); its times count from the first
press, and "time to all running" needs all K students running.

Printed: launches; time spent submitting; HTTP statuses; time from the first POST to the last
session running; p50/p99 of launch -> running per session (client send time to the session's
running_at); p50 of queued -> admitted (created_at -> admitted_at) and of admitted -> running.
Everything it started is stopped and every resource given back on exit, on Ctrl-C and on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

from bench.harness import (
    POSTGRES_SERVER_URL,
    REDIS_SERVER_URL,
    ROOT,
    CpuMeter,
    Fired,
    Resources,
    bench_main,
    fire_at_once,
    fmt_seconds,
    free_port,
    http_request,
    new_token,
    percentile,
    postgres_create_database,
    postgres_drop_database,
    redis_claim_database,
    redis_release_database,
    retry_until_accepted,
    run_id,
    status_counts,
    wait_until,
)

INSTANCES_PER_SERVER = 128  # 8 cards x 16 small (5 %, 4 GiB) development instances
PASSWORD = "bench-password-not-secret"


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
    parser.add_argument("--threads", type=int, default=32, help="client threads sending the launches, default 32")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds from the first launch to give up, default 180")
    parser.add_argument(
        "--web-conn-max-age",
        type=int,
        metavar="SECONDS",
        help="Daphne's CONN_MAX_AGE (as ?conn_max_age= on its DATABASE_URL), for comparing with portals older than the "
        "connection pool; the portal now always sets CONN_MAX_AGE 0 with a pool per process, so it has no effect there",
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
    if args.launches < 1 or args.servers < 1 or args.workers < 1 or args.concurrency < 1 or args.threads < 1:
        parser.error("--launches, --servers, --workers, --concurrency and --threads must be >= 1")
    return args


def portal_env(
    *,
    database_url: str,
    redis_url: str,
    var_dir: Path,
    start_delay: float,
    channels_prefix: str,
    driver: dict[str, str] | None = None,
) -> dict[str, str]:
    """The portal's environment; ``driver``: the ``LAB_DRIVER*`` variables (default: the simulator, ``start_delay``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "LAB_", "CELERY_")) and k != "PORTAL_VAR_DIR"}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        SECRET_KEY=new_token(),
        DEBUG="0",
        PORTAL_VAR_DIR=str(var_dir),
        CHANNELS_PREFIX=channels_prefix,
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    env.update(
        driver or {"LAB_DRIVER": "labs.drivers.simulator.SimulatorDriver", "LAB_SIMULATOR_DELAY_SECONDS": str(start_delay)}
    )
    return env


def server_name(index: int) -> str:
    """The name of the bench's ``index``-th server (0-based): the portal's Node and, on Kubernetes, the node's."""
    return f"npu-{index + 1:03d}"


def start_cluster(res: Resources, temp: Path, args: argparse.Namespace) -> tuple[object, dict[str, str]]:
    """A local control plane with ``--servers`` fake FlexNPU nodes, deploy/ applied; it and the driver's variables.

    The driver authenticates with a token of the ServiceAccount deploy/ makes (the shipped RBAC),
    and gives each lab an Ingress, as a portal with LAB_K8S_INGRESS_HOST does.
    """
    from kubernetes import client

    from labs.devcluster.cluster import DevCluster
    from labs.devcluster.nodes import FakeNode
    from labs.devcluster.portal import deploy_portal, portal_driver_options, portal_token

    began = time.monotonic()
    nodes = [FakeNode(name=server_name(i), profile="flexnpu") for i in range(args.servers)]
    cluster = DevCluster(temp / "cluster", nodes=nodes, start_delay_seconds=args.start_delay)
    res.on_close("stop the control plane", cluster.stop)
    cluster.start()
    deploy_portal(cluster)
    options = portal_driver_options(
        cluster,
        portal_token(client.CoreV1Api(cluster.api), seconds=24 * 3600),
        namespace_prefix="lab-",
        profile="flexnpu",
        ingress_host="labs.bench.example",
    )
    print(f"control plane with {args.servers} fake node(s), deploy/ applied: {time.monotonic() - began:.1f} s", flush=True)
    driver = {"LAB_DRIVER": "labs.drivers.kubernetes.KubernetesDriver", "LAB_DRIVER_OPTIONS": json.dumps(options)}
    return cluster, driver


def build_class(launches: int, servers: int):
    """Nodes, one course with a quota for every launch, ``launches`` students, the small template."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password

    from labs.models import Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

    institution = Institution.objects.create(name="Bench University", slug="bench")
    for s in range(servers):
        node = Node.objects.create(name=server_name(s))
        Card.objects.bulk_create(
            Card(node=node, index=i, die_id=f"{node.name}-die-{i}", chip_type="Ascend910B", memory_mib=64 * 1024)
            for i in range(8)
        )
    course = Course.objects.create(institution=institution, code="BENCH101", title="Class start bench", term="bench")
    CourseQuota.objects.create(
        course=course,
        core_percent=5 * launches,
        memory_mib=4096 * launches,
        instance_count=launches,
        sessions_per_student=1,
        max_session_minutes=180,
    )
    template = LabTemplate.objects.create(
        institution=institution, name="small", slug="small", image="jupyter/base:latest", core_percent=5, memory_mib=4096
    )
    course.templates.add(template)
    password = make_password(PASSWORD)  # one hash shared by all: hashing K times would only cost set-up time
    User = get_user_model()
    students = User.objects.bulk_create(User(username=f"student{i + 1:04d}", password=password) for i in range(launches))
    Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in students)
    return course, template, students


def login_cookies_direct(students) -> dict[int, tuple[str, str]]:
    """A Django session per student written straight to the database, as ``login()`` would; returns Cookie headers."""
    from datetime import timedelta

    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session
    from django.utils import timezone
    from django.utils.crypto import get_random_string

    store = SessionStore()
    expire = timezone.now() + timedelta(days=1)
    rows, cookies = [], {}
    for user in students:
        key = get_random_string(32, "abcdefghijklmnopqrstuvwxyz0123456789")
        data = {
            SESSION_KEY: str(user.pk),
            BACKEND_SESSION_KEY: "django.contrib.auth.backends.ModelBackend",
            HASH_SESSION_KEY: user.get_session_auth_hash(),
        }
        rows.append(Session(session_key=key, session_data=store.encode(data), expire_date=expire))
        csrf = get_random_string(32)  # an unmasked CSRF secret: valid as both the cookie and the header
        cookies[user.pk] = (f"sessionid={key}; csrftoken={csrf}", csrf)
    Session.objects.bulk_create(rows, batch_size=1000)
    return cookies


def login_cookies_http(base_url: str, students, threads: int) -> dict[int, tuple[str, str]]:
    """Log each student in through /accounts/login/ (GET for the CSRF cookie and token, then POST)."""
    import re

    from bench.harness import cookies_of

    def login(user) -> tuple[int, tuple[str, str]]:
        page = http_request("GET", f"{base_url}/accounts/login/")
        csrf_cookie = cookies_of(page)["csrftoken"]
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body).group(1).decode()
        body = urlencode({"username": user.username, "password": PASSWORD, "csrfmiddlewaretoken": token})
        done = http_request(
            "POST",
            f"{base_url}/accounts/login/",
            body=body,
            headers={"Cookie": f"csrftoken={csrf_cookie}", "Content-Type": "application/x-www-form-urlencoded"},
        )
        jar = cookies_of(done)
        if done.status != 302 or "sessionid" not in jar:
            raise RuntimeError(f"login of {user.username} failed with HTTP {done.status}")
        csrf = jar.get("csrftoken", csrf_cookie)
        return user.pk, (f"sessionid={jar['sessionid']}; csrftoken={csrf}", csrf)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(pool.map(login, students))


def start_services(res: Resources, env: dict[str, str], args: argparse.Namespace, rid: str, *, web_processes: int = 1) -> str:
    """Daphne (``web_processes`` of them accepting on one listening socket), the workers and beat; the portal's URL."""
    python = sys.executable
    port = free_port()
    web_env = dict(env)
    if args.web_conn_max_age is not None:
        web_env["DATABASE_URL"] = f"{env['DATABASE_URL']}?conn_max_age={args.web_conn_max_age}"
    if web_processes == 1:
        webs = [
            res.start(
                "daphne", [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"], env=web_env
            )
        ]
    else:
        # One socket, bound here and inherited: the kernel hands each connection to one of the processes.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(1024)
        res.on_close("close the web processes' listening socket", listener.close)
        fd = listener.fileno()
        webs = [
            res.start(f"daphne{i + 1}", [python, "-m", "daphne", "--fd", str(fd), "portal.asgi:application"], env=web_env,
                      pass_fds=(fd,))
            for i in range(web_processes)
        ]  # fmt: skip
    workers = [
        res.start(
            f"worker{i + 1}",
            [
                python, "-m", "celery", "-A", "portal", "worker",
                "--loglevel", "INFO", "--pool", "prefork", "--concurrency", str(args.concurrency),
                "--hostname", f"bench-{rid}-w{i + 1}@%h", "--without-gossip", "--without-mingle",
            ],
            env=env,
        )
        for i in range(args.workers)
    ]  # fmt: skip
    beat = res.start(
        "beat",
        [
            python, "-m", "celery", "-A", "portal", "beat", "--loglevel", "INFO",
            "--schedule", str(res.temp_dir / "celerybeat-schedule"),
        ],
        env=env,
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    everyone = [*webs, beat, *workers]
    wait_until(lambda: http_request("GET", f"{base_url}/accounts/login/", timeout=5).status == 200,
               timeout=60, what="Daphne to answer", services=everyone)  # fmt: skip
    for worker in workers:
        wait_until(lambda w=worker: " ready." in w.output(), timeout=60, what=f"{worker.name} to be ready", services=everyone)
    wait_until(lambda: "beat: Starting" in beat.output(), timeout=60, what="beat to start", services=everyone)
    return base_url


def poll_until_running(course, expected: int, started: float, timeout: float, retrier: threading.Thread) -> dict[str, int]:
    """Poll every 0.2 s until ``expected`` sessions run, the timeout passes, or nothing can change any more."""
    from django.db.models import Count

    from labs.models import LabSession

    deadline = started + timeout
    while True:
        by_state = dict(LabSession.objects.filter(course=course).values_list("state").annotate(n=Count("id")).order_by())
        if by_state.get("running", 0) >= expected or time.time() >= deadline:
            return by_state
        if not retrier.is_alive() and set(by_state) <= {"running", "failed", "stopped"}:
            return by_state  # every launch answered and every session settled, not all running
        time.sleep(0.2)


def cpu_meter(res: Resources, cluster, db_name: str) -> CpuMeter:
    """The CPU of the run's processes from the first launch to the last lab running: where the time went."""
    groups = {
        "Daphne": [s.process.pid for s in res.services if s.name.startswith("daphne")],
        "Celery workers": [s.process.pid for s in res.services if s.name.startswith("worker")],
        "Celery beat": [s.process.pid for s in res.services if s.name == "beat"],
    }
    if cluster is not None:
        groups.update({name: [pid] for name, pid in cluster.pids().items()})
    match = {
        "PostgreSQL (this run's backends)": lambda command: f" {db_name} " in command,
        "Redis server (shared with other work)": lambda command: command.startswith("redis-server"),
    }
    # This process (the node simulator, the client threads, the polling) is in "everything else":
    # a group would count its children, the services above, twice.
    return CpuMeter(groups, match)


class ConnectionSampler(threading.Thread):
    """Counts the connections to the run's database every 0.1 s (as the server's superuser: not within the run's limit)."""

    def __init__(self, server_url: str, db_name: str) -> None:
        super().__init__(daemon=True)
        import psycopg

        self.db_name = db_name
        self.conn = psycopg.connect(f"{server_url.rstrip('/')}/postgres", autocommit=True)
        self.max_connections = int(self.conn.execute("SHOW max_connections").fetchone()[0])
        self.peak = 0
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            count = self.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [self.db_name]).fetchone()[0]
            self.peak = max(self.peak, count)
            self.stopping.wait(0.1)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)
        self.conn.close()


def run(args: argparse.Namespace) -> dict:
    rid = run_id()
    db_name = f"bench_classstart_{rid}"
    res = Resources(keep_temp=args.keep_logs)
    figures: dict = {"bench": "portal", "launches": args.launches, "servers": args.servers}
    try:
        temp = res.make_temp_dir(f"npu-lab-bench-classstart-{rid}-")
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
        base_url = start_services(res, env, args, rid)
        if args.http_login:
            cookies = login_cookies_http(base_url, students, args.threads)
        else:
            cookies = login_cookies_direct(students)
        # One logged-in page view, so a broken login shows up here and not as K failed launches.
        cookie, _ = cookies[students[0].pk]
        home = http_request("GET", f"{base_url}/", headers={"Cookie": cookie})
        if home.status != 200:
            raise RuntimeError(f"a logged-in student gets HTTP {home.status} for / (expected 200)")
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
            return lambda: http_request("POST", f"{base_url}/sessions/launch/", headers=headers, body=body)

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
        by_state = poll_until_running(course, args.launches, started, args.timeout, retrier)
        meter.stop()
        sampler.stop()
        retrier.join(timeout=1)
        figures.update(collect(course, fired, retried, started, submitted, args.launches, by_state))
        figures["threads"] = args.threads
        figures["peak_db_connections"] = sampler.peak
        figures["cpu_percent_of_one_core"] = meter.shares
        figures["max_connections"] = sampler.max_connections
        figures["db_connection_limit"] = args.db_connection_limit
        if cluster is not None:
            figures.update(start_split(cluster, course))
        if cluster is not None and figures["time_to_all_running"] is not None:
            figures.update(stop_class(cluster, course, base_url, cookies, args))
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


def stop_class(cluster, course, base_url: str, cookies: dict[int, tuple[str, str]], args: argparse.Namespace) -> dict:
    """Every student presses Stop at once; until every session is stopped and the API server holds nothing of the class."""
    from django.db.models import Count

    from labs.devcluster.portal import lab_objects_left
    from labs.drivers.kubernetes.builders import namespace_name
    from labs.models import Allocation, LabSession

    sessions = dict(LabSession.objects.filter(course=course).values_list("student_id", "pk"))

    def stop(user_pk: int):
        cookie, csrf = cookies[user_pk]
        headers = {"Cookie": cookie, "X-CSRFToken": csrf, "Accept": "application/json"}
        return lambda: http_request("POST", f"{base_url}/sessions/{sessions[user_pk]}/stop/", headers=headers)

    fired = fire_at_once([(str(pk), stop(pk)) for pk in sessions], threads=args.threads)
    started = min(f.sent_at for f in fired)
    deadline = started + args.timeout
    namespace = namespace_name(course.code, namespace_prefix="lab-")
    stopped_after = left_after = None
    by_state: dict[str, int] = {}
    left: dict[str, list[str]] = {}
    while time.time() < deadline:
        if stopped_after is None:
            by_state = dict(LabSession.objects.filter(course=course).values_list("state").annotate(n=Count("id")).order_by())
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


def collect(course, fired, retried, started: float, submitted: float, launches: int, by_state: dict[str, int]) -> dict:
    from labs.models import LabSession

    sent = {int(f.key): f.sent_at for f in fired}  # a retried launch counts from the first press
    fields = ("student_id", "created_at", "admitted_at", "started_at", "running_at")
    rows = [(s, c, a, r) for s, c, a, _, r in LabSession.objects.filter(course=course).values_list(*fields)]
    launch_to_running = [r.timestamp() - sent[s] for s, _, _, r in rows if r is not None]
    queued_to_admitted = [(a - c).total_seconds() for _, c, a, _ in rows if a is not None]
    admitted_to_running = [(r - a).total_seconds() for _, _, a, r in rows if a is not None and r is not None]
    starts = LabSession.objects.filter(course=course).values_list("admitted_at", "started_at", "running_at")
    admitted_to_started = [(s - a).total_seconds() for a, s, _ in starts if a is not None and s is not None]
    started_to_running = [(r - s).total_seconds() for _, s, r in starts if s is not None and r is not None]
    running = by_state.get("running", 0)
    failures = Counter(
        session.reason for session in LabSession.objects.filter(course=course, state__in=("failed", "stopping", "stopped"))
    )
    last_running = max((r.timestamp() for *_, r in rows if r is not None), default=None)
    return {
        "accepted": sum(1 for f in fired if f.status == 201),
        "sessions": len(rows),
        "running": running,
        "stuck": {state: n for state, n in by_state.items() if state != "running"},
        "failures": dict(failures.most_common(5)),
        "http_statuses": status_counts(fired),
        "retry_statuses": status_counts(retried) if retried else "",
        "submit_seconds": submitted,
        "time_to_all_running": (last_running - started) if running >= launches and last_running else None,
        "time_to_last_running": (last_running - started) if last_running else None,
        "launch_to_running_p50": percentile(launch_to_running, 50),
        "launch_to_running_p99": percentile(launch_to_running, 99),
        "queued_to_admitted_p50": percentile(queued_to_admitted, 50),
        "admitted_to_running_p50": percentile(admitted_to_running, 50),
        "admitted_to_started_p50": percentile(admitted_to_started, 50),
        "started_to_running_p50": percentile(started_to_running, 50),
    }


def report(f: dict, args: argparse.Namespace) -> None:
    capacity = INSTANCES_PER_SERVER * args.servers
    where = "simulator" if args.driver == "simulator" else "Kubernetes driver, real control plane, node simulator"
    print(
        f"portal class start: {f['launches']} launches, {args.servers} server(s) x 8 x 910B 64 GiB, "
        f"{args.workers} worker(s) x concurrency {args.concurrency} (prefork), {where}, start {args.start_delay:g} s"
    )
    if f["launches"] > capacity:
        print(f"  note: only {capacity} small instances fit on {args.servers} server(s); the rest wait for room")
    if args.web_conn_max_age is not None:
        print(f"  Daphne's CONN_MAX_AGE set to {args.web_conn_max_age} s (--web-conn-max-age)")
    print(f"  submitting: {f['launches']} POSTs from {args.threads} threads took {f['submit_seconds']:.2f} s")
    print(f"  HTTP statuses: {f['http_statuses']}")
    if f["retry_statuses"]:
        print(f"  launches pressed again 1 s after a server error: {f['retry_statuses']}")
    if f["time_to_all_running"] is not None:
        print(f"  time to all running: {f['time_to_all_running']:.2f} s ({f['running']} of {f['launches']} running)")
    else:
        stuck = ", ".join(f"{state}: {n}" for state, n in sorted(f["stuck"].items())) or "none"
        print(
            f"  NOT all running: {f['running']} of {f['launches']} running "
            f"({f['sessions']} sessions created); stuck by state: {stuck}; timeout {args.timeout:g} s"
        )
        for why, n in f["failures"].items():
            print(f"    {n} ended with: {why}")
        if f["time_to_last_running"] is not None:
            print(f"  the last of those {f['running']} was running after {f['time_to_last_running']:.2f} s")
    print(
        f"  launch -> running per session: p50 {fmt_seconds(f['launch_to_running_p50'])}, "
        f"p99 {fmt_seconds(f['launch_to_running_p99'])}"
    )
    print(
        f"  queued -> admitted p50 {fmt_seconds(f['queued_to_admitted_p50'])}; "
        f"admitted -> running p50 {fmt_seconds(f['admitted_to_running_p50'])} "
        f"(admitted -> created {fmt_seconds(f['admitted_to_started_p50'])}, "
        f"created -> running {fmt_seconds(f['started_to_running_p50'])})"
    )
    if "bound_to_ready_p50" in f:
        print(
            f"  on the cluster, p50: create sent -> pod bound to its node {fmt_seconds(f['started_to_bound_p50'])}, "
            f"bound -> Ready {fmt_seconds(f['bound_to_ready_p50'])} (start {args.start_delay:g} s), "
            f"Ready -> running in the portal {fmt_seconds(f['ready_to_running_p50'])}"
        )
    print(
        f"  PostgreSQL connections to this run's database, most seen (sampled every 0.1 s): {f['peak_db_connections']} "
        f"(limit of the run's role {f['db_connection_limit']}; server max_connections {f['max_connections']})"
    )
    if f.get("cpu_percent_of_one_core"):
        print("  CPU from the first launch to the last lab running, in % of one core (the machine has "
              f"{os.cpu_count()}):")  # fmt: skip
        for name, share in sorted(f["cpu_percent_of_one_core"].items(), key=lambda item: -item[1]):
            print(f"    {share:6.1f}  {name}")
    if "stop_statuses" in f:
        print(f"  stop: HTTP statuses {f['stop_statuses']}; ", end="")
        if f["time_to_all_stopped"] is None:
            stuck = ", ".join(f"{state}: {n}" for state, n in sorted(f["stopped_by_state"].items()))
            print(f"NOT all stopped ({stuck})")
        else:
            print(f"all stopped after {f['time_to_all_stopped']:.2f} s", end="")
            if f["time_to_nothing_left"] is not None:
                print(f", nothing of the class left in the API server after {f['time_to_nothing_left']:.2f} s")
            else:
                left = ", ".join(f"{n} {kind}" for kind, n in f["left_in_api_server"].items())
                print(f"; still in the API server at the timeout: {left}")
        print(f"  allocations not released: {f['unreleased_allocations']}")


def main(argv: list[str] | None = None) -> int:
    """0 when every lab ran, then stopped with nothing left and every allocation released; else 1."""
    return bench_main(run, parse_args(argv), passed=passed, interrupted="interrupted; everything started was stopped and removed")


def passed(figures: dict) -> bool:
    cleared = figures.get("time_to_nothing_left", 0) is not None and not figures.get("unreleased_allocations")
    return figures["time_to_all_running"] is not None and cleared


if __name__ == "__main__":
    sys.exit(main())
