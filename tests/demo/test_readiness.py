"""``wait_until_listening``: the demo prints its URL only once the web server accepts connections."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from labs.supervisor import NotListening, wait_until_listening


def bound_socket(host: str = "127.0.0.1") -> socket.socket:
    """A socket holding a free port without listening on it yet: connections are refused."""
    server = socket.socket()
    server.bind((host, 0))
    return server


def test_it_returns_once_the_port_starts_listening() -> None:
    with bound_socket() as server:
        port = server.getsockname()[1]
        threading.Timer(0.5, server.listen).start()
        began = time.monotonic()

        wait_until_listening("127.0.0.1", port, timeout=10)

        assert 0.5 <= time.monotonic() - began < 5


def test_a_port_nobody_listens_on_times_out() -> None:
    with bound_socket() as server:
        with pytest.raises(NotListening, match=r"within 0.3 s"):
            wait_until_listening("127.0.0.1", server.getsockname()[1], timeout=0.3)


def test_it_gives_up_at_once_with_the_reason_it_is_given() -> None:
    with bound_socket() as server:
        began = time.monotonic()

        with pytest.raises(NotListening, match="web exited"):
            wait_until_listening("127.0.0.1", server.getsockname()[1], timeout=10, give_up=lambda: "web exited")

        assert time.monotonic() - began < 1


def test_a_server_on_every_address_is_reached_on_the_loopback_one() -> None:
    with bound_socket("0.0.0.0") as server:
        server.listen()

        wait_until_listening("0.0.0.0", server.getsockname()[1], timeout=5)
