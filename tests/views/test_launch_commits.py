"""What a student's launch POST, through the ASGI application, costs PostgreSQL in transactions
(issue 32: a class start is a burst of launches, and each transaction is work for the database):
one, the launch's own, which holds the session's and the user's reads as well (the view opens it);
for the page's script (JSON) one more, in autocommit: the session's place in the queue, read after
the commit. A pooled connection is handed out without a statement when the server has not spoken
on it (``portal.postgresql``) and goes back without one (``portal.env``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest
from django.db import connections

from labs.models import LabSession
from tests.asgi_client import AsgiClient
from tests.served import POSTGRESQL_ONLY

pytestmark = [POSTGRESQL_ONLY, pytest.mark.django_db(transaction=True)]


def _settled(pool) -> None:
    """Wait until every connection of ``pool`` is back in it and none is being opened."""
    deadline = time.monotonic() + 30
    while (stats := pool.get_stats())["pool_available"] != stats["pool_size"]:
        assert time.monotonic() < deadline, stats
        time.sleep(0.02)


def _close_every_connection() -> None:
    for alias in connections:
        connections[alias].close()
        pool = getattr(connections[alias], "pool", None)
        if pool is not None:
            if not pool.closed:
                _settled(pool)
            connections[alias].close_pool()


def _autovacuum_off() -> None:
    """No autovacuum on the test database's tables: a worker's own transactions (one per table it
    vacuums or analyzes, the tables just filled by ``migrate`` and the fixtures) count in
    ``xact_commit`` too, and one that started during a window added tens of commits to it. One
    already running is waited for by the reading, as any other connection.

    The system catalogs, which ``migrate`` churns as much, cannot be told so: they are analyzed
    and then vacuumed here, before the window (in that order: analyzing writes ``pg_statistic``'s
    rows, which the vacuum then clears), so that a worker finds nothing due in them for a while.
    The clean-clone CI once counted a stop at 31 commits with only the tables' autovacuum off."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT format('ALTER TABLE %I.%I SET (autovacuum_enabled = off)', schemaname, tablename)"
            " FROM pg_tables WHERE schemaname = current_schema()"
        )
        for (statement,) in cursor.fetchall():
            cursor.execute(statement)
        cursor.execute("ANALYZE")
        cursor.execute("VACUUM")


def _committed(action: Callable[[], object]) -> int:
    """The transactions PostgreSQL counts as committed (``pg_stat_database.xact_commit``) while
    ``action`` runs on a warm pool, as a serving process's is. A backend reports its counts at the latest when it exits, so every
    connection is closed before each reading; what opening and closing costs is the same for every
    action and cancels out between two windows."""
    settings = connections["default"].settings_dict
    name = settings["NAME"]
    dsn = psycopg.conninfo.make_conninfo(
        dbname=name,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
        host=settings["HOST"],
        port=settings["PORT"] or None,
    )

    def reading() -> int:
        _close_every_connection()
        # One transaction, rolled back: the reading adds no commit of its own, however long it
        # waits (each poll reads a fresh snapshot of the statistics).
        with psycopg.connect(dsn) as stats:
            deadline = time.monotonic() + 30
            query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
            while True:
                stats.execute("SELECT pg_stat_clear_snapshot()")
                if not stats.execute(query, [name]).fetchone()[0]:
                    break
                assert time.monotonic() < deadline, "connections to the test database did not end"
                time.sleep(0.02)
            committed = stats.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [name]).fetchone()[0]
            maintained = stats.execute(MAINTENANCE).fetchone()[0]
            stats.rollback()
            return committed, maintained

    _autovacuum_off()
    before = reading()
    # The pool, with two connections open: a request takes one and the pool does not grow.
    pool = connections["default"].pool
    pool.open(wait=True)
    warm = [pool.getconn(), pool.getconn()]
    for raw in warm:
        pool.putconn(raw)
    _settled(pool)
    action()
    after = reading()
    if after[1] != before[1]:
        raise Disturbed(f"autovacuum vacuumed or analyzed {after[1] - before[1]} tables in the window")
    return after[0] - before[0]


# What autovacuum has done in the test database, the shared catalogs (pg_shdepend, pg_database)
# among its tables: the other databases a test run creates and drops churn those, and a worker
# may vacuum them from this database at any time.
MAINTENANCE = "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_all_tables"


class Disturbed(Exception):
    """An autovacuum worker worked in the test database during a window: its transactions count
    in ``xact_commit`` with the action's, and the window measures nothing."""


ATTEMPTS = 3


def measured(prepare: Callable[[int], Callable[[], object]]) -> tuple[int, int, int]:
    """``(attempt, idle, commits)``: the commits of an idle window and of the action
    ``prepare(attempt)`` sets up, from the first attempt that autovacuum left alone (each attempt
    a new action: ``prepare`` makes its state afresh, another student's)."""
    for attempt in range(ATTEMPTS):
        action = prepare(attempt)
        try:
            return attempt, _committed(lambda: None), _committed(action)
        except Disturbed:
            continue
    pytest.fail(f"autovacuum worked in the test database during each of {ATTEMPTS} attempts: nothing was measured")


@pytest.mark.parametrize("accept", ["text/html", "application/json"])
def test_a_launch_post_costs_one_transaction_and_its_json_answer_one_more(world, accept):
    responses = []

    def prepare(attempt: int) -> Callable[[], object]:
        client = AsgiClient(user=world["students"][attempt])
        client.get("/")  # the CSRF cookie
        body = {"course": world["course"].pk, "template": world["small"].pk}
        return lambda: responses.append(client.post("/sessions/launch/", data=body, headers={"Accept": accept}))

    attempt, idle, commits = measured(prepare)

    assert responses[-1].status_code == (201 if accept == "application/json" else 302), responses[-1].text[:500]
    assert LabSession.objects.filter(student=world["students"][attempt], state="queued").count() == 1
    assert commits - idle == (2 if accept == "application/json" else 1), (commits, idle)
