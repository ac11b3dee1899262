"""The portal ``make chaos`` runs: its processes started and stopped, its class of students built."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import shutil
import socket
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.chaos.ledger import InvariantMonitor, Ledger
from bench.chaos.plan import CARD_MIB, CARDS_PER_NODE, DATABASE, DEV_NODE_CAP, NODES, TEMPLATES, say, wait_until
from bench.chaos.processes import PostgresServer, Proc, agent_up, redis_up
from bench.chaos.report import Check, FaultFigures, Target
from bench.harness import ROOT, free_port, http_request


@dataclass
class Student:
    index: int
    user_id: int
    template_id: int
    template: str
    cookie: str
    csrf: str


class Stack:
    """The run's processes and state: PostgreSQL, Redis, the agents, two Daphne, two workers, beat."""

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

        from bench.classstart.portal import login_cookies_direct
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

    def node_available(self, name: str) -> bool:
        return bool(self.ledger.rows("SELECT available FROM labs_node WHERE name = %s", [name])[0][0])

    def simulator(self):
        from labs.drivers.simulator import SimulatorDriver

        return SimulatorDriver(state_dir=str(self.dir / "var" / "driver"))

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
