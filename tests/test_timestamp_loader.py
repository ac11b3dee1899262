"""portal.postgresql: timestamps read by psycopg's compiled loader answer what Django's loader
answers (the same instants, in UTC, with ``datetime.UTC``), on the connections Django makes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader

from portal.postgresql.base import IS_COMPILED, TIMESTAMPTZ_OID, UtcTimestamptzLoader

pytestmark = pytest.mark.django_db

# Whole seconds (no fraction written), microseconds, trailing zeros, the extremes Python holds,
# offsets PostgreSQL turns into UTC, and NULL.
VALUES = (
    "'2026-12-03 17:14:00+00'", "'2026-12-03 17:14:00.120976+00'", "'2026-12-03 17:14:00.1+00'",
    "'2026-12-03 23:59:59.999999-08:30'", "'0001-01-01 00:00:00+00'", "'9999-12-31 23:59:59.999999+00'",
    "'2000-02-29 12:00:00+14'", "NULL",
)  # fmt: skip
QUERY = "SELECT " + ", ".join(f"{v}::timestamptz" for v in VALUES)


def postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("psycopg's loaders")


def test_the_connections_django_makes_read_timestamps_with_the_compiled_loader():
    postgresql_only()
    from psycopg.pq import Format

    if not IS_COMPILED:
        pytest.skip("psycopg without its compiled part: Django's loader stays")
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT) is UtcTimestamptzLoader
        cursor.execute("SELECT now()")
        (now,) = cursor.fetchone()
    assert now.tzinfo is UTC
    assert abs(now - datetime.now(UTC)) < timedelta(minutes=5)


def test_the_compiled_loader_answers_what_djangos_answers():
    postgresql_only()
    with connection.cursor() as cursor:
        cursor.execute(QUERY)
        ours = cursor.fetchone()
    with connection.cursor() as cursor:
        register_tzloader(UTC, cursor.cursor)  # Django's own, on this cursor only
        cursor.execute(QUERY)
        djangos = cursor.fetchone()
    assert ours == djangos
    assert [v.tzinfo for v in ours if v is not None] == [v.tzinfo for v in djangos if v is not None]
    assert all(v.tzinfo is UTC for v in ours if v is not None)
    assert ours[0] == datetime(2026, 12, 3, 17, 14, tzinfo=UTC)
    assert ours[3] == datetime(2026, 12, 4, 8, 29, 59, 999999, tzinfo=UTC)
    assert ours[-1] is None


def test_a_connection_in_another_zone_gets_djangos_loader():
    postgresql_only()
    query = "SELECT " + ", ".join(f"{v}::timestamptz" for v in VALUES[:4])  # year 9999 in UTC is 10000 in Shanghai
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Shanghai'")
        try:
            cursor.execute(query)
            ours = cursor.fetchone()
            register_tzloader(UTC, cursor.cursor)
            cursor.execute(query)
            djangos = cursor.fetchone()
        finally:
            cursor.execute("SET TIME ZONE 'UTC'")
    # Django's loader keeps the wall-clock time and labels it UTC; so does ours, on such a connection.
    assert ours == djangos
    assert ours[0] == datetime(2026, 12, 4, 1, 14, tzinfo=UTC)
