"""A prefork worker process (the deployment's) keeps its database connection from task to task:
a new PostgreSQL connection per task cost the server a backend and its catalog caches each time,
several times per session in a class start."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from labs.models import LabSession
from labs.services.sessions import session_launch
from tests.conftest import wait_for
from tests.served import POSTGRESQL_ONLY

pytestmark = [pytest.mark.slow, POSTGRESQL_ONLY]

APPLICATION = f"portal-worker-{uuid.uuid4().hex[:8]}"


def state_of(session) -> str:
    return LabSession.objects.values_list("state", flat=True).get(pk=session.pk)


def backends_of(application_name: str) -> set[tuple[int, object]]:
    """The server processes (pid, start time) of the connections a process started with ``PGAPPNAME`` holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        return set(cursor.fetchall())


def test_a_prefork_worker_process_runs_its_tasks_on_the_connection_it_keeps(world, start_worker):
    worker = start_worker(pool="prefork", concurrency=1, PGAPPNAME=APPLICATION, LAB_SIMULATOR_DELAY_SECONDS="0.2")
    first = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    wait_for(lambda: state_of(first) == "running", timeout=60, message=lambda: f"running; log:\n{worker.output()[-3000:]}")
    wait_for(lambda: backends_of(APPLICATION), timeout=10, message="the worker holds a connection between tasks")
    held = backends_of(APPLICATION)

    second = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    wait_for(lambda: state_of(second) == "running", timeout=60, message=lambda: f"running; log:\n{worker.output()[-3000:]}")
    # The second launch's tasks (the controller's runs, the start) ran on the same connection.
    assert backends_of(APPLICATION) == held
