"""bench.asgi_servers: the comparison of answers between servers, and one tiny run of the whole bench."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.asgi_servers import FLOOR, LAUNCH, SOCKETS, STOP, Row, differences, parse_args, server_command
from bench.harness import ROOT


def row(server: str, work: str, statuses: dict) -> Row:
    return Row(server, work, 4, 10.0, 1.0, 2.0, 1.0, "0.00 0.00 0.00", statuses)


def test_a_server_that_answers_with_other_status_codes_is_reported():
    rows = [row("daphne", LAUNCH, {201: 4}), row("granian", LAUNCH, {201: 3, 500: 1})]

    (found,) = differences("daphne", rows, {"daphne": [], "granian": []})

    assert "granian" in found and "500" in found


def test_pages_that_received_other_messages_are_reported():
    rows = [row("daphne", FLOOR, {200: 4}), row("uvicorn", FLOOR, {200: 4})]
    daphne = [[("sessions", (("s1", "queued"),))]]

    assert differences("daphne", rows, {"daphne": daphne, "uvicorn": daphne}) == []
    assert differences("daphne", rows, {"daphne": daphne, "uvicorn": [[]]}) == [
        "uvicorn: the pages received other websocket messages than under daphne"
    ]


def test_an_unknown_server_is_refused_with_the_known_ones_named(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--servers", "daphne,gunicorn"])
    assert "unknown gunicorn; choose from daphne, uvicorn, granian" in capsys.readouterr().err
    with pytest.raises(ValueError):
        server_command("gunicorn", 8000)


@pytest.mark.slow
def test_a_tiny_run_serves_the_portal_under_three_servers_with_the_same_answers(tmp_path):
    figures_path = tmp_path / "figures.json"
    command = [
        sys.executable, "-m", "bench.asgi_servers", "--servers", "daphne,uvicorn,granian", "--students", "3",
        "--requests", "6", "--concurrency", "2", "--events", "2", "--json", str(figures_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(figures_path.read_text())
    assert figures["problems"] == []
    by = {(r["server"], r["work"]): r for r in figures["rows"]}
    for server in ("daphne", "uvicorn", "granian"):
        assert by[(server, FLOOR)]["statuses"] == {"200": 6}
        assert by[(server, LAUNCH)]["statuses"] == {"201": 6}
        assert by[(server, STOP)]["statuses"] == {"200": 6}
        assert by[(server, SOCKETS)]["statuses"] == {"complete": True}
        assert by[(server, SOCKETS)]["count"] == 3 * 2
        assert by[(server, LAUNCH)]["cpu_ms_per_item"] > 0  # 12 requests of ~40 ms: more than a clock tick
    assert "x daphne" in done.stdout and "same status codes and websocket messages" in done.stdout


@pytest.mark.slow
def test_a_tiny_run_can_open_a_connection_for_every_request(tmp_path):
    figures_path = tmp_path / "figures.json"
    command = [
        sys.executable, "-m", "bench.asgi_servers", "--servers", "daphne", "--students", "2", "--requests", "4",
        "--concurrency", "2", "--events", "1", "--fresh-connections", "--json", str(figures_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    by = {(r["server"], r["work"]): r for r in json.loads(figures_path.read_text())["rows"]}
    assert by[("daphne", FLOOR)]["statuses"] == {"200": 4}
    assert by[("daphne", LAUNCH)]["statuses"] == {"201": 4} and by[("daphne", STOP)]["statuses"] == {"200": 4}
