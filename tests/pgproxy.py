"""A TCP proxy in front of PostgreSQL that can drop a connection right after a commit, as a
failover or a network cut at that moment would: the change is committed, and the next statement
on the connection fails.

``arm_on(marker, times=1)``: the next statement the client sends that contains ``marker`` is not
passed on; its connection is closed both ways instead (a cut in the middle of a request, before
that statement ran), and so for the next ``times`` such statements (a server ending connections
again and again). ``cut`` is set once the first happened, ``cuts`` counts them.

``arm()``: the next connection through the proxy whose COMMIT the server acknowledges is closed
(both ways) right after the acknowledgement and its ReadyForQuery reach the client, so the
client's ``commit()`` returns normally. ``cut`` is set once that happened. Only the server's
messages are read (PostgreSQL's wire protocol: a type byte, then a 4-byte length); the client
must connect without TLS or GSSAPI encryption (``sslmode=disable``, ``PGGSSENCMODE=disable``) so
that they can be.
"""

from __future__ import annotations

import socket
import threading

import pytest
from django.conf import settings


class CommitCuttingProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut = threading.Event()
        self._armed = False
        self._marker: bytes | None = None
        self._marker_times = 0
        self.cuts = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self.cut.clear()
        with self._lock:
            self._armed = True

    def arm_on(self, marker: bytes, times: int = 1) -> None:
        self.cut.clear()
        with self._lock:
            self._marker, self._marker_times, self.cuts = marker, times, 0

    def _claim_marker(self, data: bytes) -> bool:
        with self._lock:
            if self._marker is None or self._marker not in data:
                return False
            self._marker_times -= 1
            self.cuts += 1
            if self._marker_times <= 0:
                self._marker = None
            return True

    def close(self) -> None:
        self.listener.close()
        for sock in self._sockets:
            _close(sock)

    def _claim(self) -> bool:
        with self._lock:
            armed, self._armed = self._armed, False
            return armed

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._client_to_server, args=(client, server), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(server, client), daemon=True).start()

    def _client_to_server(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                if self._claim_marker(data):
                    _close(client)
                    _close(server)
                    self.cut.set()
                    return
                server.sendall(data)
        except OSError:
            pass
        _close(server)

    def _server_to_client(self, server: socket.socket, client: socket.socket) -> None:
        pending = b""
        committed = False
        try:
            while data := server.recv(65536):
                pending += data
                out = bytearray()
                while len(pending) >= 5 and len(pending) >= 1 + int.from_bytes(pending[1:5], "big"):
                    size = 1 + int.from_bytes(pending[1:5], "big")
                    message, pending = pending[:size], pending[size:]
                    out += message
                    if message[:1] == b"C" and message[5:] == b"COMMIT\0" and self._claim():
                        committed = True
                    elif committed and message[:1] == b"Z":  # ReadyForQuery: the commit is over
                        client.sendall(out)
                        _close(client)
                        _close(server)
                        self.cut.set()
                        return
                client.sendall(out)
        except OSError:
            pass
        _close(client)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def database_url_through(proxy: CommitCuttingProxy) -> str:
    """``DATABASE_URL`` for a portal process whose connections to this test's database go through ``proxy``."""
    from urllib.parse import urlsplit, urlunsplit

    from tests.conftest import child_env

    url = urlsplit(child_env()["DATABASE_URL"])
    netloc = url.netloc.rsplit("@", 1)
    credentials = netloc[0] + "@" if len(netloc) == 2 else ""
    return urlunsplit(url._replace(netloc=f"{credentials}127.0.0.1:{proxy.port}", query="sslmode=disable"))


@pytest.fixture(name="proxy")
def proxy_fixture():
    """A ``CommitCuttingProxy`` in front of this test's PostgreSQL server."""
    db = settings.DATABASES["default"]
    proxy = CommitCuttingProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    yield proxy
    proxy.close()


@pytest.fixture(name="portal_server_env")
def portal_server_env_through_proxy(proxy) -> dict[str, str]:
    """``portal_server``'s Daphne connects to the database through ``proxy`` (a module that
    imports this fixture overrides the default one of tests/conftest.py)."""
    return {"DATABASE_URL": database_url_through(proxy), "PGGSSENCMODE": "disable"}
