"""A launch or a stop whose database connection is lost right after its commit (a failover at
that moment) is answered as done, not with a 500: the lab is queued or stopped all the same."""

from __future__ import annotations

import pytest

from labs.models import LabSession
from tests.pgproxy import portal_server_env_through_proxy, proxy_fixture  # noqa: F401 (fixtures: Daphne through the proxy)
from tests.served import POSTGRESQL_ONLY, signed_in

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]


def test_a_launch_and_a_stop_that_lose_their_connection_right_after_the_commit_are_answered_as_done(world, proxy, portal_server):
    client = signed_in(portal_server, world["students"][0])

    proxy.arm()
    launch = client.post("/sessions/launch/", data={"course": world["course"].pk, "template": world["small"].pk})

    assert proxy.cut.is_set(), "the launch committed through the proxy"
    assert launch.status_code == 201, launch.text[:500]
    session = LabSession.objects.get()
    answer = launch.json()["session"]
    assert (answer["id"], answer["state"], answer["template"]) == (str(session.pk), "queued", world["small"].name)
    assert answer["queue_position"] is None  # read after the commit, when the connection was gone
    assert session.state == "queued"

    proxy.arm()
    stop = client.post(f"/sessions/{session.pk}/stop/")

    assert proxy.cut.is_set(), "the stop committed through the proxy"
    assert stop.status_code == 200, stop.text[:500]
    session.refresh_from_db()
    assert session.state == "stopped"
