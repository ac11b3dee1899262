"""A real node agent (simulated driver) served over HTTP: in a thread, bound to the test node, or in a process of its own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from labs.drivers import get_driver

TOKEN = "test-agent-token-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[2]


class RunningAgent:
    def __init__(self, node_name: str) -> None:
        from nodeagent.cards.simulated import SimulatedDriver

        self.node_name = node_name
        self.driver = SimulatedDriver(cards=8, node_name=node_name)
        self.port = 0
        self.server = None
        self.start()

    def start(self) -> None:
        from nodeagent.server import make_server

        self.server = make_server(self.driver, TOKEN, "127.0.0.1", self.port, self.node_name)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def agent(world, settings):
    settings.LAB_AGENT_TOKEN = TOKEN
    settings.LAB_AGENT_REGISTERS_INSTANCES = True
    running = RunningAgent(world["node"].name)
    world["node"].agent_url = running.url
    world["node"].save(update_fields=["agent_url"])
    yield running
    running.stop()


@pytest.fixture
def cluster_driver():
    """The run's simulator, empty: labs an earlier test in this process left would be orphans here."""
    driver = get_driver()
    for session_id in driver.list():
        driver.delete(session_id)
    yield driver
    for session_id in driver.list():
        driver.delete(session_id)


class AgentProcess:
    """``python -m nodeagent --driver simulated`` in a process of its own, so it can hang
    (``pause``: SIGSTOP, as a host that stops answering) and come back (``resume``: SIGCONT)."""

    def __init__(self, node_name: str, log_dir: Path) -> None:
        self.log_path = log_dir / f"agent-{node_name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
        env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", AGENT_TOKEN=TOKEN)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "nodeagent", "--driver", "simulated", "--port", "0", "--node", node_name],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            match = re.search(r"listening on (http://\S+)", self.log_path.read_text())
            if match:
                return match[1]
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"the agent did not start: {self.log_path.read_text()}")

    def entity_ids(self) -> set[str]:
        from nodeagent.client import AgentClient

        return {i.entity_id for i in AgentClient(self.url, TOKEN, timeout=5).instances()}

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.resume()  # a stopped process does not act on SIGTERM
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def agent_process(tmp_path):
    """Start ``AgentProcess(node_name)``; every one started is stopped after the test."""
    started: list[AgentProcess] = []

    def start(node_name: str) -> AgentProcess:
        started.append(AgentProcess(node_name, tmp_path))
        return started[-1]

    yield start
    for agent in started:
        agent.stop()
