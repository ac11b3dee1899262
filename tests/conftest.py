"""Shared fixtures: real PostgreSQL (pytest-django's test database) and real Redis."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from django.conf import settings

ROOT = Path(__file__).resolve().parents[1]
LOG_TAIL_LINES = 200
# What the running test's processes (workers, Daphne) and browser pages wrote: a title and how to
# read it, added to its report if it fails.
ON_FAILURE: list[tuple[str, Callable[[], str]]] = []


def pytest_runtest_setup(item) -> None:
    ON_FAILURE.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report ends with what its processes and pages wrote last: a failure seen
    once in CI, in a run whose files are gone, can then still be read."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        for title, read in ON_FAILURE:
            report.sections.append((title, read()))


@pytest.fixture(autouse=True)
def services_ready(clean_redis_and_driver_state, disconnect_child_processes):
    """A test may use this run's database, Redis and driver state: they are made ready once, before
    the first such test. Tests that need none override this fixture (tests/domain/conftest.py), so
    a run of them alone connects to neither PostgreSQL nor Redis."""


@pytest.fixture(scope="session")
def clean_redis_and_driver_state():
    """Start from an empty Redis database and driver state (this run's own); free them at the end."""
    from tests.settings import REDIS_CLAIM_KEY, REDIS_UNREACHABLE, RUN_ID

    if REDIS_UNREACHABLE:
        pytest.fail(
            f"this test needs Redis, which did not answer at {REDIS_UNREACHABLE} when the run started "
            "(tests/settings.py claims a database number there): start Redis or set TEST_REDIS_URL",
            pytrace=False,
        )
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    client.set(REDIS_CLAIM_KEY, RUN_ID, ex=3 * 3600)  # flushdb dropped the claim; hold it for the run
    shutil.rmtree(settings.LAB_DRIVER["OPTIONS"]["state_dir"], ignore_errors=True)
    yield
    client.flushdb()
    if settings.VAR_DIR.name.startswith(f"npu-lab-portal-test-{RUN_ID}-"):
        shutil.rmtree(settings.VAR_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def default_language():
    """Every test starts in the portal's default language. Django's test client leaves the
    language of its last request active in the test's thread (LocaleMiddleware activates it and
    nothing deactivates it), so a test reading a rendered reason after another test's Chinese
    request would read Chinese."""
    from django.utils import translation

    translation.activate(settings.LANGUAGE_CODE)
    yield
    translation.deactivate()


@pytest.fixture(scope="session")
def disconnect_child_processes(django_db_setup, django_db_blocker):
    """Before the test database is dropped, end connections that killed child processes left."""
    yield
    from django.db import connection

    # pytest-django creates no test database when no collected test needs one.
    if connection.vendor != "postgresql" or not connection.settings_dict["NAME"].startswith("test_"):
        return
    import psycopg

    # This process's own pool keeps (and refills) idle connections: close it first, then end the
    # rest (killed child processes', async threads') from a connection outside any pool, so none
    # is left when pytest-django drops the test database.
    connection.close()
    if hasattr(connection, "close_pool"):
        connection.close_pool()
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"] or None, dbname=db["NAME"], autocommit=True
    ) as own:
        own.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
def world(db):
    """One 8 x 910B node and a course with 4 students, templates small (5 %/4 GiB) and medium (10 %/8 GiB)."""
    from tests.factories import course_with_students, node_with_cards

    node = node_with_cards()
    course, templates, students, instructor = course_with_students(4)
    return {
        "node": node,
        "course": course,
        "small": templates[0],
        "medium": templates[1],
        "students": students,
        "instructor": instructor,
    }


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a portal process (worker, web) that must see this test's database."""
    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        url = f"sqlite:///{db['NAME']}"
    else:
        user = db["USER"] + (f":{quote(db['PASSWORD'], safe='')}" if db["PASSWORD"] else "")
        url = f"postgres://{user}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = dict(os.environ)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=url,
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class ServiceProcess:
    """A portal process (celery worker, daphne) started for one test and stopped after it."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        ON_FAILURE.append((f"{name} ({self.log_path.name}), last {LOG_TAIL_LINES} lines", self.tail))

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait()

    def stop(self, timeout: float = 10) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture
def start_worker(transactional_db, tmp_path):
    """Start real Celery worker processes on the test Redis broker and database.

    The controller's wake-up markers go first: an earlier test may have left "a run is queued"
    behind (its worker stopped before the run), and a launch here would then wake nobody.
    """
    from labs.dispatch import FOLLOW_UP_KEY, QUEUED_KEY

    redis.Redis.from_url(settings.REDIS_URL).delete(QUEUED_KEY, FOLLOW_UP_KEY)
    started: list[ServiceProcess] = []

    def start(
        name: str = "worker", concurrency: int = 2, pool: str = "prefork", beat: bool = False, **env: str
    ) -> ServiceProcess:
        """``beat``: the worker runs the beat schedule too (``-B``), its state file in ``tmp_path``."""
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--loglevel",
            "INFO",
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--hostname",
            f"{name}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
        ]
        if beat:
            command += ["-B", "--schedule", str(tmp_path / f"{name}-beat-schedule")]
        process = ServiceProcess(name, command, child_env(**env), tmp_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerURL(str):
    """A base URL that also names the pid of the process serving it."""

    pid: int


@pytest.fixture
def portal_server_env() -> dict[str, str]:
    """Environment ``portal_server`` starts Daphne with, beside ``child_env``'s: a test overrides it."""
    return {}


@pytest.fixture
def portal_server(transactional_db, tmp_path, portal_server_env):
    """daphne serving portal.asgi on a free port, on this test's database; yields its base URL
    (a ``ServerURL``: ``.pid`` is Daphne's)."""
    port = free_port()
    server = ServiceProcess(
        "web",
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
        child_env(**portal_server_env),
        tmp_path,
    )
    url = ServerURL(f"http://127.0.0.1:{port}")
    url.pid = server.process.pid
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/accounts/login/", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or server.process.poll() is not None:
                server.stop()
                raise AssertionError(f"daphne did not start:\n{server.output()[-3000:]}") from None
            time.sleep(0.2)
    yield url
    server.stop()


def wait_for(predicate, timeout: float = 30, interval: float = 0.1, message="condition"):
    """Poll ``predicate`` until truthy; ``message`` may be a callable, evaluated only on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message() if callable(message) else message}")


@pytest.fixture
def dns(settings):
    """The test's DNS (tests/dns.py) as the portal's resolver for calls to other servers."""
    from tests import dns as test_dns

    test_dns.SCRIPT = test_dns.ScriptedDns()
    settings.OUTBOUND_RESOLVER = "tests.dns.resolve"
    yield test_dns.SCRIPT
    test_dns.SCRIPT = test_dns.ScriptedDns()
