"""DATABASE_POOL_MIN_SIZE: a process's pool keeps that many PostgreSQL connections open once it has
been used (deploy/ gives the web pods their whole pool), and one by default."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import connection

from tests.conftest import ROOT, child_env

# The child uses its pool once, waits for the pool to fill in the background, then counts, in
# PostgreSQL, the connections open under its own application name (PGAPPNAME, one per call).
SCRIPT = """
import os, time
import django
django.setup()
from django.db import connection
connection.ensure_connection()
pool = connection.pool
deadline = time.monotonic() + 20
while pool.get_stats()["pool_size"] < pool.min_size and time.monotonic() < deadline:
    time.sleep(0.05)
connection.close()
time.sleep(0.2)
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                   [os.environ["PGAPPNAME"]])
    print(cursor.fetchone()[0])
"""


def open_connections(**env: str) -> int:
    """The connections a new portal process holds open after its first query, as PostgreSQL counts them."""
    name = f"pool-kept-{env.get('DATABASE_POOL_MIN_SIZE', 'default')}"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=child_env(PGAPPNAME=name, **env), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
def test_a_process_keeps_open_the_connections_it_is_told_to_and_one_by_default():
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL connection pool")
    # psycopg_pool may open one more while the first query waits for the pool to fill; it closes
    # what is above the minimum after 10 idle minutes.
    assert open_connections(DATABASE_POOL_MIN_SIZE="4") in (4, 5)
    assert open_connections() in (1, 2)
