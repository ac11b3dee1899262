"""The API's launch and stop whose database connection is lost right after the commit (a
failover at that moment) answer as done, not with a 500: the LMS need not guess."""

from __future__ import annotations

import httpx
import pytest

from api.scopes import SCOPES
from api.services import token_create
from labs.models import LabSession
from tests.pgproxy import portal_server_env_through_proxy, proxy_fixture  # noqa: F401 (fixtures: Daphne through the proxy)
from tests.served import POSTGRESQL_ONLY

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]


@pytest.fixture
def api(world, portal_server):
    _token, secret = token_create(institution=world["course"].institution, name="lms", scopes=list(SCOPES))
    with httpx.Client(base_url=f"{portal_server}/api/v1", headers={"Authorization": f"Bearer {secret}"}, timeout=60) as client:
        yield client


def launch_body(world) -> dict:
    return {"course": world["course"].pk, "template": world["small"].slug, "student": world["students"][0].username}


@pytest.mark.parametrize("key", ["", "launch-1"], ids=["without-key", "with-idempotency-key"])
def test_a_launch_that_loses_its_connection_right_after_the_commit_answers_201(world, proxy, api, key):
    proxy.arm()
    response = api.post("/sessions/", json=launch_body(world), headers={"Idempotency-Key": key} if key else {})

    assert proxy.cut.is_set(), "the launch committed through the proxy"
    assert response.status_code == 201, response.text[:500]
    session = LabSession.objects.get()
    answer = response.json()
    assert (answer["id"], answer["state"], answer["student"]) == (str(session.pk), "queued", world["students"][0].username)
    assert (answer["course_code"], answer["template"]) == (world["course"].code, world["small"].slug)


def test_a_stop_that_loses_its_connection_right_after_the_commit_answers_200_with_the_stopped_session(world, proxy, api):
    session_id = api.post("/sessions/", json=launch_body(world)).json()["id"]

    proxy.arm()
    response = api.post(f"/sessions/{session_id}/stop/")

    assert proxy.cut.is_set(), "the stop committed through the proxy"
    assert response.status_code == 200, response.text[:500]
    assert (response.json()["id"], response.json()["state"]) == (session_id, "stopped")
    assert LabSession.objects.get().state == "stopped"
