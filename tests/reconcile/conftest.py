"""A real node agent (simulated driver) served over HTTP in a thread, bound to the test node."""

from __future__ import annotations

import threading

import pytest

from labs.drivers import get_driver

TOKEN = "test-agent-token-0123456789abcdef"


class RunningAgent:
    def __init__(self, node_name: str) -> None:
        from labs.agent.drivers import SimulatedDriver

        self.node_name = node_name
        self.driver = SimulatedDriver(cards=8, node_name=node_name)
        self.port = 0
        self.server = None
        self.start()

    def start(self) -> None:
        from labs.agent.server import make_server

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
