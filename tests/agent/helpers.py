"""Helpers for the agent tests: a server in a thread, raw HTTP calls, a fake vendor CLI."""

from __future__ import annotations

import http.client
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent.cards.base import NodeDriver
from nodeagent.server import AgentServer, make_server

TOKEN = "agent-test-token-4f1c9a"
FIXTURES = Path(__file__).parent / "fixtures"
NODE = "node-a"


@contextmanager
def running(driver: NodeDriver, token: str = TOKEN) -> Iterator[AgentServer]:
    """The agent serving ``driver`` on a free local port until the block ends."""
    server = make_server(driver, token, host="127.0.0.1", port=0, node=NODE)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(
    server: AgentServer,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = TOKEN,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """One HTTP request to the agent; ``body`` is sent as JSON, ``raw`` as is."""
    host, port = server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=10)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        return Response(response.status, response.headers, response.read())
    finally:
        connection.close()


FAKE_CLI = """#!{python}
# A stand-in for a vendor CLI: records its argv, prints the configured output for 'info',
# and forgets a FlexNPU id on 'unregister -u <id>' (so a later 'info' no longer lists it).
import json, pathlib, sys, time
here = pathlib.Path(__file__).resolve().parent
name = pathlib.Path(__file__).name
with open(here / (name + ".calls"), "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
config = json.loads((here / (name + ".json")).read_text())
time.sleep(config["sleep_seconds"])
removed = here / (name + ".removed")
gone = set(removed.read_text().split()) if removed.exists() else set()
if sys.argv[1:] == ["info"]:
    for line in pathlib.Path(config["output"]).read_bytes().splitlines(keepends=True):
        cells = [c.strip() for c in line.decode("utf-8", "replace").split("|")]
        if len(cells) > 3 and cells[3] in gone:
            continue
        sys.stdout.buffer.write(line)
    sys.stderr.write(config["stderr"])
    sys.exit(config["exit_code"])
if sys.argv[1:3] == ["unregister", "-u"] and len(sys.argv) == 4:
    if config["unregister_exit_code"] == 0:
        with open(removed, "a") as out:
            out.write(sys.argv[3] + "\\n")
    sys.exit(config["unregister_exit_code"])
if sys.argv[1:] == ["info", "-t", "device-share"] and config["device_share"]:
    sys.stdout.buffer.write(pathlib.Path(config["device_share"]).read_bytes())
    sys.exit(0)
if sys.argv[1:4] == ["info", "-t", "board"] and config["board"]:
    sys.stdout.buffer.write(pathlib.Path(config["board"]).read_bytes())
    sys.exit(config["board_exit_code"])
sys.stderr.write("usage: " + name + " info | unregister -u <flexnpu ID>\\n")
sys.exit(64)
"""


@dataclass
class FakeCli:
    """A fake ``flexnpu-smi`` / ``npu-smi`` written to a directory; ``calls()`` is every argv it got."""

    path: Path

    def calls(self) -> list[list[str]]:
        log = self.path.with_name(self.path.name + ".calls")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def unregister_calls(self) -> list[list[str]]:
        return [argv for argv in self.calls() if argv[:1] == ["unregister"]]


def fake_cli(
    directory: Path,
    name: str,
    output: str,
    *,
    exit_code: int = 0,
    stderr: str = "",
    sleep_seconds: float = 0,
    unregister_exit_code: int = 0,
    board: str | None = None,
    board_exit_code: int = 0,
    device_share: str | None = None,
) -> FakeCli:
    """Write a fake CLI ``directory/name`` whose ``info`` prints the fixture file ``output``
    (``info -t board ...`` the fixture ``board`` and ``info -t device-share`` the fixture
    ``device_share``, when given; without, they fail as an older npu-smi does)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(FAKE_CLI.format(python=sys.executable))
    path.chmod(0o755)
    config = {
        "output": str(FIXTURES / output),
        "exit_code": exit_code,
        "stderr": stderr,
        "sleep_seconds": sleep_seconds,
        "unregister_exit_code": unregister_exit_code,
        "board": None if board is None else str(FIXTURES / board),
        "board_exit_code": board_exit_code,
        "device_share": None if device_share is None else str(FIXTURES / device_share),
    }
    path.with_name(name + ".json").write_text(json.dumps(config))
    return FakeCli(path)
