"""A request whose database connection is cut in the middle, before it wrote anything, is run
again on a new connection (``portal.middleware.LostConnectionRetry``) instead of answering 500;
one that had committed a change is not run twice."""

from __future__ import annotations

import time

import pytest

from labs.models import LabSession
from portal.middleware import PAUSES
from tests.pgproxy import portal_server_env_through_proxy, proxy_fixture  # noqa: F401 (fixtures: Daphne through the proxy)
from tests.served import POSTGRESQL_ONLY, signed_in

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]


def test_a_page_and_a_launch_cut_before_they_wrote_are_answered_as_if_nothing_happened(world, proxy, portal_server):
    client = signed_in(portal_server, world["students"][0])
    assert client.get("/", headers={"Accept": "text/html"}).status_code == 200

    # The dashboard's read of the enrolments, cut as it is sent.
    proxy.arm_on(b"labs_enrollment")
    page = client.get("/", headers={"Accept": "text/html"})
    assert proxy.cut.is_set(), "the page's connection was cut"
    assert page.status_code == 200, page.text[:300]

    # The launch's first read of the course, cut before its transaction wrote anything.
    proxy.arm_on(b"labs_course")
    launch = client.post("/sessions/launch/", data={"course": world["course"].pk, "template": world["small"].pk})
    assert proxy.cut.is_set(), "the launch's connection was cut"
    assert launch.status_code == 201, launch.text[:500]
    assert LabSession.objects.count() == 1  # run again once, queued once


def test_a_launch_cut_again_and_again_for_a_few_seconds_is_waited_out(world, proxy, portal_server):
    # A server ending every connection for a while (a failover that flaps, pg_terminate_backend
    # in a loop): the launch's read cut five times running, more than a run-at-once retry outlasts.
    client = signed_in(portal_server, world["students"][0])
    proxy.arm_on(b"labs_course", times=5)
    started = time.monotonic()
    launch = client.post("/sessions/launch/", data={"course": world["course"].pk, "template": world["small"].pk})
    waited = time.monotonic() - started
    assert proxy.cuts == 5
    assert launch.status_code == 201, launch.text[:500]
    assert LabSession.objects.count() == 1
    assert waited >= sum(PAUSES[:5]), f"the runs again were spaced out ({waited:.2f} s)"


def test_a_request_cut_after_its_change_committed_is_not_run_again(world, proxy, portal_server):
    client = signed_in(portal_server, world["students"][0])
    launch = client.post("/sessions/launch/", data={"course": world["course"].pk, "template": world["small"].pk})
    assert launch.status_code == 201
    session = LabSession.objects.get()
    # A second launch is refused (one session per student): its refusal reads; a stop writes and
    # commits, then the cut comes with the next statement after the commit: answered as done once.
    proxy.arm()
    stop = client.post(f"/sessions/{session.pk}/stop/")
    assert proxy.cut.is_set()
    assert stop.status_code == 200
    session.refresh_from_db()
    assert session.state == "stopped"
    assert LabSession.objects.count() == 1
