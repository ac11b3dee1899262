"""Two demos side by side: each portal's node agent listens on a port of its own
(``PORTAL_PORT`` + 1410; 8000 keeps the agent's usual 9410), and each demo's node names it."""

from __future__ import annotations

import signal
import socket

import pytest
from django.core.management import CommandError, call_command

from labs.models import Node
from labs.services.demo import DEMO_NODE, demo_agent_port, demo_data_load
from tests.conftest import free_port


def test_two_portal_ports_give_two_agent_ports_and_the_node_names_the_one_of_its_demo(db):
    urls = []
    for portal_port in (8000, 8001):
        demo_data_load(students=2, agent_port=demo_agent_port(portal_port))
        urls.append(Node.objects.get(name=DEMO_NODE).agent_url)
    assert urls == ["http://127.0.0.1:9410", "http://127.0.0.1:9411"]


def test_a_portal_port_without_room_for_the_agents_is_refused():
    with pytest.raises(ValueError, match="choose a PORTAL_PORT from 1 to 64125"):
        demo_agent_port(64126)


@pytest.fixture
def stop_signals_restored():
    """run_demo installs its own SIGINT, SIGTERM and SIGHUP handlers: pytest's come back after."""
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def test_the_demo_will_not_start_beside_something_on_its_agents_port(db, stop_signals_restored):
    portal_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", demo_agent_port(portal_port)))
        taken.listen()
        with pytest.raises(CommandError, match=f"already answers on 127.0.0.1:{demo_agent_port(portal_port)}"):
            call_command("run_demo", host="127.0.0.1", port=portal_port)
    assert not Node.objects.exists()  # refused before the database was prepared
