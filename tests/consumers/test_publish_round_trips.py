"""A pass's page updates go to Redis together: one round trip, not one per group they go to.

Over the real Redis, through a TCP proxy that counts the pieces of the server's answers as they
arrive: a PUBLISH sent alone waits for its answer before the next goes, so each group's costs
one answer of its own; publishes sent together (``portal.channel_layer``) are answered together.
"""

from __future__ import annotations

import copy
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.test import override_settings

from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.factories import course_with_students, node_with_cards

pytestmark = pytest.mark.django_db(transaction=True)


class AnswerCountingProxy:
    """Passes bytes both ways between its clients and ``upstream``; ``answers`` counts the reads
    of what the server sent (every connection)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.answers = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        try:
            while data := source.recv(65536):
                if answers:
                    with self._lock:
                        self.answers += 1
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
        for sock in self._sockets:
            sock.close()


@pytest.fixture
def proxied_layer():
    """The channel layer, connecting to Redis through an :class:`AnswerCountingProxy`."""
    redis = urlsplit(settings.REDIS_URL)
    proxy = AnswerCountingProxy((redis.hostname, redis.port or 6379))
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    layers["default"]["CONFIG"]["hosts"] = [urlunsplit(redis._replace(netloc=f"127.0.0.1:{proxy.port}"))]
    with override_settings(CHANNEL_LAYERS=layers):
        yield proxy
    proxy.close()


def test_a_pass_admitting_60_students_sends_their_pages_updates_in_one_round_trip(proxied_layer):
    node_with_cards()
    course, (small, _), students, _ = course_with_students(60, code="AI101")
    for student in students:
        session_launch(student=student, course=course, template=small)
    proxied_layer.answers = 0

    assert len(allocation_pass().admitted) == 60

    # 62 publishes (60 students' groups, the course's, the cluster page's): sent one by one, each
    # would be answered on its own. Together they are answered at once; the connection's own
    # greeting (the client's name and version, the database number) adds a few answers.
    assert 0 < proxied_layer.answers <= 8
