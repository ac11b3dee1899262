"""AgentClient against a real agent thread, and against agents that are down, slow or broken."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.client import (
    AgentAuthError,
    AgentClient,
    AgentError,
    AgentRequestError,
    AgentUnavailable,
    AgentUnreachable,
)
from nodeagent.wire import CardReport, HealthReport, InstanceReport
from tests.agent.helpers import NODE, TOKEN, fake_cli, running


@pytest.fixture
def client(agent):
    return AgentClient(agent.url, TOKEN)


def test_health(client):
    assert client.health() == HealthReport(ok=True, node=NODE, driver="simulated")


def test_inventory_returns_card_reports(client, simulated):
    cards = client.inventory()

    assert len(cards) == 8
    assert cards[0] == CardReport(
        index=0,
        die_id=simulated.inventory()[0].die_id,
        chip_type="Ascend910B",
        memory_total_mib=65536,
        memory_used_mib=0,
        aicore_percent=0,
        healthy=True,
        power_milliwatts=90000,
        temperature_celsius=35,
    )


def test_register_set_demand_instances_and_unregister(client):
    registered = client.register("pod-1", card_index=2, core_percent=25, memory_mib=8192, scenario="inference", policy="elastic")
    loaded = client.set_demand("pod-1", 60, memory_used_mib=1024)

    assert registered == InstanceReport("pod-1", "1", 2, 25, 8192, 0, 0, 0)
    assert loaded == InstanceReport("pod-1", "1", 2, 25, 8192, 1024, 60, 60)
    assert client.instances() == [loaded]
    assert client.unregister("pod-1") is True
    assert client.unregister("pod-1") is False
    assert client.instances() == []


def test_entity_ids_are_quoted_in_paths(client):
    client.register("ns:pod.1", card_index=0, core_percent=5, memory_mib=128)

    assert client.set_demand("ns:pod.1", 5).aicore_percent == 5
    assert client.unregister("ns:pod.1") is True


def test_a_refused_request_raises_with_the_status_and_reason(client):
    client.register("pod-1", card_index=0, core_percent=25, memory_mib=8192)

    with pytest.raises(AgentRequestError, match=r"instance pod-1 is already registered \(card 0\)") as duplicate:
        client.register("pod-1", card_index=1, core_percent=25, memory_mib=8192)
    with pytest.raises(AgentRequestError, match="memory_mib must be a positive multiple of 128 MiB, got 100") as invalid:
        client.register("pod-2", card_index=0, core_percent=25, memory_mib=100)
    with pytest.raises(AgentRequestError, match="no instance pod-9 on this node") as unknown:
        client.set_demand("pod-9", 10)

    assert (duplicate.value.status, invalid.value.status, unknown.value.status) == (409, 400, 404)
    assert isinstance(invalid.value, ValueError)


def test_a_wrong_token_raises_agent_auth_error(agent):
    client = AgentClient(agent.url, "not-the-token")

    assert client.health().ok is True
    for method in (client.inventory, client.instances, lambda: client.unregister("pod-1")):
        with pytest.raises(AgentAuthError, match=r"the agent refused the token \(401\)"):
            method()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_agent_that_is_down_raises_agent_unreachable():
    client = AgentClient(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=2)

    for method in (client.health, client.inventory, client.instances, lambda: client.unregister("pod-1")):
        with pytest.raises(AgentUnreachable, match="Connection refused"):
            method()


def test_an_agent_that_does_not_answer_in_time_raises_agent_unreachable():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = AgentClient(f"http://127.0.0.1:{listener.getsockname()[1]}", TOKEN, timeout=0.3)

        with pytest.raises(AgentUnreachable, match="timed out"):
            client.instances()


def test_an_agent_that_cannot_read_its_node_raises_agent_unavailable_with_the_reason(tmp_path):
    flexnpu = fake_cli(tmp_path, "flexnpu-smi", "flexnpu_smi_info_several.txt", exit_code=2, stderr="aclserver unreachable\n")
    with running(FlexnpuSmiDriver(binary=str(flexnpu.path))) as agent:
        client = AgentClient(agent.url, TOKEN)

        message = r"502 '.*flexnpu-smi info' exited with status 2: aclserver unreachable"
        with pytest.raises(AgentUnavailable, match=message) as failed:
            client.instances()
        assert not isinstance(failed.value, AgentUnreachable)  # it answered: the node is not down
        with pytest.raises(AgentRequestError, match="does not register instances") as refused:
            client.register("pod-1", card_index=0, core_percent=5, memory_mib=128)
    assert refused.value.status == 405


class Canned(BaseHTTPRequestHandler):
    """Answers every GET with the class's canned status, headers and body."""

    status = 200
    headers_out: dict[str, str] = {}
    body = b""

    def do_GET(self):
        self.send_response(self.status)
        for name, value in self.headers_out.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def canned_client(status: int, body: bytes, headers: dict[str, str] | None = None):
    handler = type("Handler", (Canned,), {"status": status, "body": body, "headers_out": headers or {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server, AgentClient(f"http://127.0.0.1:{server.server_address[1]}", TOKEN)


@pytest.mark.parametrize(
    "status, body, headers, message",
    [
        (200, b"<html>proxy login</html>", {}, "the answer is not JSON"),
        (200, b'{"cards": "none"}', {}, "malformed answer from the agent: no 'cards' list"),
        (200, b'{"cards": [{"index": 0}]}', {}, "malformed answer from the agent: CardReport.die_id is None"),
        (200, b'{"cards": [{"index": true}]}', {}, "CardReport.index is True"),
        (503, b"", {}, "503"),
        (302, b"", {"Location": "http://elsewhere.example/"}, "302"),
    ],
)
def test_a_broken_answer_raises_agent_unavailable(status, body, headers, message):
    server, client = canned_client(status, body, headers)
    try:
        with pytest.raises(AgentUnavailable, match=message):
            client.inventory()
    finally:
        server.shutdown()
        server.server_close()


def test_every_client_error_is_an_agent_error():
    assert issubclass(AgentUnavailable, AgentError)
    assert issubclass(AgentUnreachable, AgentUnavailable)
    assert issubclass(AgentAuthError, AgentError)
    assert issubclass(AgentRequestError, AgentError)


def test_a_base_url_must_be_http():
    with pytest.raises(ValueError, match="an agent URL looks like http://host:9410"):
        AgentClient("node-a:9410", TOKEN)
