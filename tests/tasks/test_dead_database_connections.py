"""A worker whose pooled database connections were all ended (a PostgreSQL restart or failover)
runs its next tasks as usual: a launch made after it still starts.

A worker keeps its pool between tasks, as the web server does: a solo worker in its one process,
a prefork worker (the deployment's) in each of its processes (``CELERY_DB_REUSE_MAX``, portal/celery.py)."""

from __future__ import annotations

import re
import uuid

import pytest

from labs.models import LabSession
from labs.services.sessions import session_launch
from tests.conftest import wait_for
from tests.served import POSTGRESQL_ONLY, connections_of, terminate_connections

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]

APPLICATION = f"portal-worker-{uuid.uuid4().hex[:8]}"


def state_of(session) -> str:
    return LabSession.objects.values_list("state", flat=True).get(pk=session.pk)


def tasks(log: str, what: str) -> set[str]:
    """The ids of the tasks the worker's ``log`` says were ``what`` (received, succeeded, raised)."""
    return set(re.findall(rf"Task \S+\[([0-9a-f-]+)\] {what}", log))


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_a_launch_starts_after_the_database_ended_every_connection_of_the_worker(world, start_worker, pool):
    worker = start_worker(pool=pool, concurrency=1, PGAPPNAME=APPLICATION, LAB_SIMULATOR_DELAY_SECONDS="0.2")
    first = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    wait_for(lambda: state_of(first) == "running", timeout=60, message=lambda: f"running; log:\n{worker.output()[-3000:]}")
    wait_for(lambda: connections_of(APPLICATION) >= 1, timeout=10, message="the worker's pools hold connections")

    assert terminate_connections(APPLICATION) >= 1
    # A task the worker had already taken may meet the cut mid-way and fail (tests/reconcile and
    # make chaos cover that); every task taken after the cut runs as usual.
    before_cut = tasks(worker.output(), "received")

    second = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    # Beat is not running: the launch's own wake is what must get it started.
    wait_for(lambda: state_of(second) == "running", timeout=20, message=lambda: f"running; log:\n{worker.output()[-3000:]}")
    log = worker.output()
    after_cut = tasks(log, "received") - before_cut
    assert after_cut, "the launch after the cut woke the worker"
    assert not after_cut & tasks(log, "raised"), f"a task taken after the cut failed; log:\n{log[-3000:]}"
