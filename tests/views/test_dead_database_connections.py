"""A web server whose pooled database connections were all ended (a PostgreSQL restart or
failover, ``pg_terminate_backend``) answers the next requests as usual, not with 500s."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from labs.models import LabSession
from tests.conftest import wait_for
from tests.served import POSTGRESQL_ONLY, connections_of, signed_in, terminate_connections

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]

APPLICATION = f"portal-web-{uuid.uuid4().hex[:8]}"
AT_ONCE = 8


@pytest.fixture
def portal_server_env() -> dict[str, str]:
    return {"PGAPPNAME": APPLICATION}


def homes_at_once(clients) -> list[int]:
    with ThreadPoolExecutor(len(clients)) as pool:
        return list(pool.map(lambda client: client.get("/").status_code, clients))


def test_pages_and_a_launch_answer_after_the_database_ended_every_pooled_connection(world, portal_server):
    clients = [signed_in(portal_server, student) for student in world["students"][:2] for _ in range(AT_ONCE // 2)]
    # Requests at once, so the pool holds several connections, as after a class's first minutes.
    assert homes_at_once(clients) == [200] * AT_ONCE
    wait_for(lambda: connections_of(APPLICATION) >= 3, timeout=10, message="the web server's pool holds connections")

    assert terminate_connections(APPLICATION) >= 3

    # Alone, the request meets every dead connection in turn: it must not wait on each.
    started = time.monotonic()
    assert clients[0].get("/").status_code == 200
    assert time.monotonic() - started < 2
    assert homes_at_once(clients) == [200] * AT_ONCE
    terminate_connections(APPLICATION)
    launch = clients[0].post("/sessions/launch/", data={"course": world["course"].pk, "template": world["small"].pk})
    assert launch.status_code == 201, launch.text[:500]
    assert LabSession.objects.filter(pk=launch.json()["session"]["id"]).exists()
