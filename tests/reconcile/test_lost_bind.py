"""A worker dies after its controller run created a lab's instance but before it recorded it, and
the student stops the lab: the stop's controller run removes the instance's registration from the
node at once, not at the residual sweep minutes later."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from labs.domain.reasons import Reason
from labs.models import LabSession
from labs.services.controller import controller_run
from labs.services.sessions import session_launch, session_stop
from tests.conftest import wait_for
from tests.reconcile.conftest import TOKEN


def row_lock(session_id) -> psycopg.Connection:
    """Another database client holding the session's row lock until its connection closes."""
    db = connection.settings_dict
    holder = psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], password=db["PASSWORD"] or None, dbname=db["NAME"]
    )
    holder.execute("SELECT 1 FROM labs_labsession WHERE id = %s FOR UPDATE", [session_id])
    return holder


def waiting_on_a_row_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
        return cursor.fetchone()[0] > 0


@pytest.mark.slow
def test_a_stop_after_a_worker_died_between_create_and_bind_leaves_no_registration(
    world, agent, cluster_driver, start_worker, settings
):
    if connection.vendor != "postgresql":
        pytest.skip("holds a PostgreSQL row lock to stop the worker at the bind")
    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    doomed = start_worker("doomed", concurrency=1, pool="solo", LAB_AGENT_TOKEN=TOKEN, LAB_SIMULATOR_CREATE_DELAY_SECONDS="1.5")
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    wait_for(
        lambda: LabSession.objects.filter(pk=session.pk, state="starting", retry_at__isnull=False).exists(),
        timeout=30,
        message=lambda: f"the create under way; log:\n{doomed.output()[-3000:]}",
    )
    # The worker's driver call is under way; when it has the instance, its bind waits on this lock ...
    holder = row_lock(session.pk)
    try:
        wait_for(lambda: str(session.pk) in cluster_driver.list() and waiting_on_a_row_lock(), timeout=30, message="the bind")
        doomed.kill()  # ... and the worker dies there
    finally:
        holder.close()
    session.refresh_from_db()
    assert session.state == "starting" and session.driver_ref == ""

    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student000"))
    # The stop's run (the dead worker's connection lets go of the controller's lock as it closes).
    wait_for(lambda: not controller_run().skipped, timeout=10, message="the controller's lock")

    assert agent.driver.instances() == []
    session.refresh_from_db()
    assert session.state == "stopped" and session.driver_ref  # the stop found the instance by its session id
    assert str(session.pk) not in cluster_driver.list()
