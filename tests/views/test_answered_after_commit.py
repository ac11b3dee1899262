"""A launch or a stop whose database connection is lost right after its commit (a failover at
that moment) is answered as done, not with a 500: the lab is queued or stopped all the same."""

from __future__ import annotations

import pytest
from django.conf import settings

from labs.models import LabSession
from tests.pgproxy import CommitCuttingProxy, database_url_through
from tests.served import POSTGRESQL_ONLY, signed_in

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]


@pytest.fixture
def proxy():
    db = settings.DATABASES["default"]
    proxy = CommitCuttingProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    yield proxy
    proxy.close()


@pytest.fixture
def portal_server_env(proxy) -> dict[str, str]:
    return {"DATABASE_URL": database_url_through(proxy), "PGGSSENCMODE": "disable"}


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
