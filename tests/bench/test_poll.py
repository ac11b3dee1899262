"""bench/poll.py: both sides of the class-start bench see "running" the same way, and the machine's
state is printed beside each result (issue 32, item 3)."""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from bench.poll import (
    FSYNC_CALLS,
    PollFailed,
    fsync_ms,
    hub_fetch,
    machine_state,
    poll_until_running,
    portal_fetch,
)

TOKEN = "issued-token"


class TwoSides(ThreadingHTTPServer):
    """Answers both APIs' list requests as they answer them (paged, with a token), for six students
    who each start running at ``began + 0.2 * i`` seconds; records every request."""

    daemon_threads = True

    def __init__(self, students: int = 6) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.names = [f"s{i}" for i in range(students)]
        self.began = time.time()
        self.requests: list[tuple[float, str, dict[str, list[str]], str]] = []

    def running(self, index: int) -> bool:
        return time.time() >= self.began + 0.2 * index

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: TwoSides

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        auth = self.headers.get("Authorization", "")
        self.server.requests.append((time.time(), parts.path, query, auth))
        names = self.server.names
        if parts.path == "/api/v1/sessions/" and auth == f"Bearer {TOKEN}":
            size, page = int(query["page_size"][0]), int(query["page"][0])
            chunk = list(enumerate(names))[(page - 1) * size : page * size]
            body = {
                "count": len(names),
                "results": [{"student": n, "state": "running" if self.server.running(i) else "queued"} for i, n in chunk],
            }
        elif parts.path == "/hub/api/users" and auth == f"token {TOKEN}":
            offset, limit = int(query["offset"][0]), int(query["limit"][0])
            chunk = list(enumerate(names))[offset : offset + limit]
            body = [{"name": n, "servers": {"": {"ready": self.server.running(i)}}} for i, n in chunk]
        else:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def two_sides():
    server = TwoSides()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_both_sides_are_polled_alike_through_their_apis_at_one_period(two_sides):
    keys = set(two_sides.names)
    period = 0.05
    portal = portal_fetch(f"{two_sides.url}", TOKEN, course_id=7, page_size=4)
    hub = hub_fetch(f"{two_sides.url}/hub/api", TOKEN, page_size=4)

    two_sides.began = time.time()
    seen_portal = poll_until_running(portal, keys, deadline=time.time() + 10, period=period)
    portal_requests = list(two_sides.requests)
    two_sides.requests.clear()
    two_sides.began = time.time()
    seen_hub = poll_until_running(hub, keys, deadline=time.time() + 10, period=period)
    hub_requests = list(two_sides.requests)

    for polled, requests in ((seen_portal, portal_requests), (seen_hub, hub_requests)):
        assert set(polled.running_at) == keys and polled.failed_polls == 0
        # The last student runs 1 s in: about 1 s / period polls, each of two pages (6 students, 4 a page).
        assert 1.0 / period - 5 <= polled.polls <= 1.0 / period + 8  # (wide: the machine is shared)
        assert len(requests) == 2 * polled.polls
        # Polls on a fixed schedule: first pages `period` apart, not `period` + the poll's own time.
        starts = [t for t, _path, query, _auth in requests if query.get("page", query.get("offset"))[0] in ("1", "0")]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        assert sorted(gaps)[len(gaps) // 2] == pytest.approx(period, abs=0.025)
        # A student's running time is the poll that saw it: after it started running, within a period or so.
        for i, name in enumerate(two_sides.names):
            started_running = 0.2 * i
            assert started_running - 0.01 <= polled.running_at[name] - requests[0][0] <= started_running + 3 * period + 0.15
    # Each with its own API and the token it issued.
    assert {path for _t, path, _q, _a in portal_requests} == {"/api/v1/sessions/"}
    assert {(q["course"][0], q["page_size"][0]) for _t, _p, q, _a in portal_requests} == {("7", "4")}
    assert {a for *_, a in portal_requests} == {f"Bearer {TOKEN}"}
    assert {path for _t, path, _q, _a in hub_requests} == {"/hub/api/users"}
    assert {a for *_, a in hub_requests} == {f"token {TOKEN}"}
    assert abs(seen_portal.polls - seen_hub.polls) <= 5


def test_a_refused_poll_is_counted_with_its_answer_and_the_deadline_ends_it(two_sides):
    fetch = hub_fetch(f"{two_sides.url}/hub/api", "not-the-token")
    with pytest.raises(PollFailed, match="HTTP 401"):
        fetch()
    polled = poll_until_running(fetch, set(two_sides.names), deadline=time.time() + 0.3, period=0.05)
    assert polled.running_at == {} and polled.failed_polls == polled.polls >= 4
    assert "HTTP 401" in polled.last_failure


def test_polling_ends_once_nothing_can_change(two_sides):
    fetch = portal_fetch(two_sides.url, TOKEN, course_id=1)
    polled = poll_until_running(
        fetch, {*two_sides.names, "never-launched"}, deadline=time.time() + 10, period=0.05, settled=lambda seen: True
    )
    assert polled.polls == 1


def test_the_portal_fetch_reads_the_real_api_page_by_page(portal_server):
    from api.services import token_create
    from labs.models import LabSession
    from tests.factories import course_with_students

    course, templates, users, _ = course_with_students(students=5)
    for i, user in enumerate(users):
        state = LabSession.State.RUNNING if i % 2 else LabSession.State.QUEUED
        LabSession.objects.create(student=user, course=course, template=templates[0], state=state, secret="x")
    _token, secret = token_create(institution=course.institution, name="bench", scopes=["sessions:read"], expires_at=None)

    seen = portal_fetch(portal_server, secret, course.pk, page_size=2)()

    assert seen == {u.username: ("running" if i % 2 else "queued") for i, u in enumerate(users)}
    with pytest.raises(PollFailed, match="HTTP 401"):
        portal_fetch(portal_server, "npl_not-a-token", course.pk)()


def test_fsync_figure_is_measured_in_the_directory_and_leaves_nothing(tmp_path: Path):
    ms = fsync_ms(tmp_path, calls=FSYNC_CALLS)
    assert 0 < ms < 10_000
    assert list(tmp_path.iterdir()) == []
    state = machine_state(tmp_path)
    assert len(state["load_average"]) == 3 and state["fsync_ms"] > 0


MACHINE = {"load_average": [1.25, 1.5, 1.75], "fsync_ms": 3.5}
MACHINE_AFTER = {"load_average": [2.25, 1.5, 1.75], "fsync_ms": 4.5}
POLLING = {"poll_period": 0.1, "polls": 30, "failed_polls": 0, "poll_failure": "", "poll_p50": 0.02}


# A class start's figures as bench.classstart reports them, and the arguments of its run.
PORTAL_FIGURES = {
    "launches": 16, "submit_seconds": 0.3, "http_statuses": "201: 16", "retry_statuses": "", "time_to_all_running": 1.6,
    "running": 16, "launch_to_running_p50": 1.5, "launch_to_running_p99": 1.6, "queued_to_admitted_p50": 0.1,
    "admitted_to_running_p50": 1.2, "admitted_to_started_p50": 0.01, "started_to_running_p50": 1.2,
    "peak_db_connections": 9, "db_connections_before": 7, "db_connections_opened": 2, "db_connection_limit": 80,
    "max_connections": 100, "post_p50": 0.12, "post_p99": 0.31,
    "machine_before": MACHINE, "machine_after": MACHINE_AFTER, **POLLING,
}  # fmt: skip
PORTAL_ARGS = argparse.Namespace(servers=1, workers=2, concurrency=4, driver="simulator", start_delay=1.0, threads=32,
                                 web_conn_max_age=None, timeout=60.0)  # fmt: skip


def test_the_portal_report_carries_load_average_fsync_and_how_running_was_seen(capsys):
    from bench.classstart.report import report

    report(PORTAL_FIGURES, PORTAL_ARGS)
    out = capsys.readouterr().out
    assert "load average 1.25 1.50 1.75 -> 2.25 1.50 1.75" in out
    assert "fsync 4.50 ms" in out
    assert "polled from outside through their own REST API every 0.1 s" in out
    assert "the portal's database: PostgreSQL" in out
    assert "most seen (sampled every 0.1 s): 9, 7 open before the first launch, 2 opened during the class start" in out
    assert "16 POSTs from 32 threads took 0.30 s (each answered in p50 0.12 s, p99 0.31 s)" in out


def test_the_hub_report_carries_load_average_fsync_its_database_and_token(capsys):
    from bench.jupyterhub import report

    figures = {
        "driver": "simulator", "jupyterhub": "6.1.1", "chp": "5.3.0", "launches": 16, "hub_db": "postgresql",
        "submit_seconds": 0.7, "http_statuses": "202: 16", "first_round_429": 0, "retry_statuses": "",
        "time_to_all_running": 2.9, "running": 16, "launch_to_running_p50": 1.9, "launch_to_running_p99": 2.9,
        "machine_before": MACHINE, "machine_after": MACHINE_AFTER, **POLLING,
    }  # fmt: skip
    args = argparse.Namespace(default_spawn_limit=False, start_delay=1.0, threads=32, timeout=60.0)
    report(figures, args)
    out = capsys.readouterr().out
    assert "load average 1.25 1.50 1.75 -> 2.25 1.50 1.75" in out and "fsync 4.50 ms" in out
    assert "the Hub's database: PostgreSQL" in out and "issued by the Hub" in out
    assert "polled from outside through their own REST API every 0.1 s" in out


def test_side_by_side_prints_each_run_beside_the_machine_and_how_it_was_measured(capsys, monkeypatch):
    from bench import side_by_side

    def fake_run(module: str, options: list[str]) -> dict:
        time_to_all = 1.5 if module == "bench.classstart" else 3.0
        return {"time_to_all_running": time_to_all, "machine_before": MACHINE, "machine_after": MACHINE_AFTER}

    # The two benches' own runs are tested above and in the bench; here only what side_by_side prints of them.
    monkeypatch.setattr(side_by_side, "run_bench", fake_run)
    assert side_by_side.main(["--launches", "16", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "how: both sides polled from outside through their own REST API every 0.1 s" in out
    assert "databases: the portal PostgreSQL, JupyterHub PostgreSQL" in out
    assert "run 1: portal 1.50 s; load average 1.25 1.50 1.75 -> 2.25 1.50 1.75" in out
    assert "JupyterHub 3.00 s; load average" in out and "fsync 4.50 ms" in out
    assert "portal / JupyterHub time to all running: 0.50" in out


def hub_settings(config_text: str):
    """The settings a jupyterhub_config.py makes, read as JupyterHub reads it (traitlets' Config)."""
    from traitlets.config import Config

    c = Config()
    exec(compile(config_text, "jupyterhub_config.py", "exec"), {"get_config": lambda: c})
    return c


def test_the_hub_config_names_postgresql_and_holds_no_token(tmp_path: Path):
    from bench.jupyterhub import ADMIN, hub_config

    ports = {"proxy_port": 1, "hub_port": 2, "proxy_api_port": 3, "stub_port": 4}
    text = hub_config(ports, chp=Path("/chp"), temp=tmp_path, db_url="postgresql+psycopg://bench_jupyterhub_x@127.0.0.1:5432/bench_jupyterhub_x",
                      spawn_limit=0, admin_password="pw")  # fmt: skip
    c = hub_settings(text)
    assert c.JupyterHub.db_url.startswith("postgresql+psycopg://")
    assert ADMIN in c.Authenticator.admin_users and c.DummyAuthenticator.password == "pw"
    # No token the config file chose: neither a service's nor api_tokens.
    assert "services" not in c.JupyterHub and "api_tokens" not in c.JupyterHub
    assert "api_token" not in text
    assert c.JupyterHub.api_page_max_limit == 500


def hub_installed() -> bool:
    from bench.jupyterhub import CACHE, CHP_VERSION, JUPYTERHUB_VERSION

    return (CACHE / f"jupyterhub-{JUPYTERHUB_VERSION}" / ".installed").exists() and (
        CACHE / f"configurable-http-proxy-{CHP_VERSION}" / ".installed"
    ).exists()


@pytest.mark.skipif(
    not hub_installed(), reason="JupyterHub is not installed for the bench (python -m bench.jupyterhub --install-only)"
)
def test_the_hub_runs_on_postgresql_and_is_asked_with_the_token_it_issued(tmp_path: Path):
    import re
    import shutil
    import subprocess
    import sys

    from bench.harness import ROOT

    figures_path = tmp_path / "figures.json"
    command = ["-m", "bench.jupyterhub", "--launches", "2", "--timeout", "60", "--keep-logs", "--json", str(figures_path)]
    done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=240)
    kept = re.search(r"logs kept in (\S+)", done.stderr)
    assert kept, done.stdout + done.stderr
    logs = Path(kept.group(1))
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        figures = json.loads(figures_path.read_text())
        assert figures["hub_db"] == "postgresql" and figures["running"] == 2 and figures["failed_polls"] == 0
        log = (logs / "jupyterhub.log").read_text()
        assert "PostgresqlImpl" in log  # alembic's dialect: the Hub's database is PostgreSQL
        assert "201 POST /hub/api/users/bench-admin/tokens" in log
        # Every API request after that one is the admin's, with the token the Hub issued.
        api_lines = [
            line for line in log.splitlines() if " /hub/api/" in line and "POST /hub/api/users/bench-admin/tokens" not in line
        ]
        requests = [line for line in api_lines if re.search(r"\b\d{3} (GET|POST|DELETE) /hub/api/users", line)]
        assert requests and all("(bench-admin@" in line for line in requests), requests[:5]
        assert "api_token" not in (logs / "jupyterhub_config.py").read_text()
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def test_the_portal_report_carries_the_cpu_per_session_beside_the_load_average(capsys):
    from bench.classstart.report import report

    figures = {
        "launches": 16, "submit_seconds": 0.3, "http_statuses": "201: 16", "retry_statuses": "", "time_to_all_running": 1.6,
        "running": 16, "launch_to_running_p50": 1.5, "launch_to_running_p99": 1.6, "queued_to_admitted_p50": 0.1,
        "admitted_to_running_p50": 1.2, "admitted_to_started_p50": 0.01, "started_to_running_p50": 1.2,
        "peak_db_connections": 9, "db_connections_before": 7, "db_connections_opened": 2, "db_connection_limit": 80,
        "max_connections": 100,
        "machine_before": MACHINE, "machine_after": MACHINE_AFTER, **POLLING,
        "cpu_ms_per_session": {"Daphne": 4.5, "Celery (workers and beat)": 2.0, "PostgreSQL (this run's backends)": 1.0,
                               "total": 7.5},
        "poll_cpu_ms": 8.0,
    }  # fmt: skip
    args = argparse.Namespace(servers=1, workers=2, concurrency=4, driver="simulator", start_delay=1.0, threads=32,
                              web_conn_max_age=None, timeout=60.0, web_processes=2, web_listen="ports")  # fmt: skip
    report(figures, args)
    out = capsys.readouterr().out
    assert "2 Daphne process(es), each on a port of its own" in out
    assert "   4.50 ms  Daphne" in out and "   7.50 ms  total" in out
    assert "about 15.00 ms (30 polls, 8.0 ms each" in out
    cpu = out[out.index("CPU per session") :]
    assert "load average 1.25 1.50 1.75 -> 2.25 1.50 1.75" in cpu.splitlines()[6]


def test_side_by_side_prints_the_portals_cpu_per_session_and_the_issues_targets(capsys, monkeypatch):
    from bench import side_by_side

    def fake_run(module: str, options: list[str]) -> dict:
        k = int(options[options.index("--launches") + 1])
        if module == "bench.jupyterhub":
            return {"time_to_all_running": 9.0, "machine_before": MACHINE, "machine_after": MACHINE_AFTER}
        cpu = {"Daphne": 10.0, "Celery": 5.0, "PostgreSQL": 6.0, "total": 21.0}
        return {"time_to_all_running": 1.5 if k == 128 else 7.0, "cpu_ms_per_session": cpu, "machine_before": MACHINE}

    monkeypatch.setattr(side_by_side, "run_bench", fake_run)
    assert side_by_side.main(["--launches", "128,1024", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    cpu = "Daphne 10.0, Celery 5.0, PostgreSQL 6.0, total 21.0"
    assert f"CPU per session, median of its runs (ms, polling included): {cpu}" in out
    assert "target: all running <= 1.6 s: met" in out
    assert "target: all running <= 6 s: MISSED" in out
