"""The API's launch answers as usual after the database ended every pooled connection of the
web server (a PostgreSQL restart or failover), not with a 500."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from api.scopes import SCOPES
from api.services import token_create
from labs.models import LabSession
from tests.conftest import wait_for
from tests.served import POSTGRESQL_ONLY, connections_of, terminate_connections

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]

APPLICATION = f"portal-api-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def portal_server_env() -> dict[str, str]:
    return {"PGAPPNAME": APPLICATION}


def test_a_launch_through_the_api_answers_after_the_database_ended_every_pooled_connection(world, portal_server):
    _token, secret = token_create(institution=world["course"].institution, name="lms", scopes=list(SCOPES))
    api = httpx.Client(base_url=f"{portal_server}/api/v1", headers={"Authorization": f"Bearer {secret}"}, timeout=60)
    with ThreadPoolExecutor(6) as pool:
        assert set(pool.map(lambda _: api.get("/templates/").status_code, range(6))) == {200}
    wait_for(lambda: connections_of(APPLICATION) >= 2, timeout=10, message="the web server's pool holds connections")

    assert terminate_connections(APPLICATION) >= 2

    body = {"course": world["course"].pk, "template": world["small"].slug, "student": world["students"][0].username}
    response = api.post("/sessions/", json=body)
    assert response.status_code == 201, response.text[:500]
    assert LabSession.objects.filter(pk=response.json()["id"], state="queued").exists()
