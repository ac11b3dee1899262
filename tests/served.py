"""Requests to a portal server (``portal_server``: Daphne) as a signed-in user, and faults in the
database connections it holds."""

from __future__ import annotations

import secrets
import time

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

# The faults here are a PostgreSQL server's: its connections ended or cut (the demo's SQLite has none).
POSTGRESQL_ONLY = pytest.mark.skipif(connection.vendor != "postgresql", reason="ends a PostgreSQL server's connections")


def signed_in(base_url: str, user) -> httpx.Client:
    """An HTTP client to ``base_url`` with ``user``'s session and a CSRF cookie and header, as a
    page's script sends them (Django takes an unmasked 32-character secret in the header)."""
    client = Client()
    client.force_login(user)  # a session in the portal's session store, as a login makes
    csrf = secrets.token_hex(16)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    return httpx.Client(
        base_url=base_url,
        cookies={settings.SESSION_COOKIE_NAME: session, settings.CSRF_COOKIE_NAME: csrf},
        headers={"X-CSRFToken": csrf, "Accept": "application/json"},
        timeout=60,
    )


def connections_of(application_name: str) -> int:
    """How many connections to this test's database a process started with ``PGAPPNAME=application_name`` holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        return cursor.fetchone()[0]


def terminate_connections(application_name: str) -> int:
    """End every connection of the processes started with ``PGAPPNAME=application_name`` on the
    server side, as a PostgreSQL restart or failover does; returns how many were ended."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        ended = cursor.fetchone()[0]
    # pg_terminate_backend only signals: wait until the backends have gone.
    deadline = time.monotonic() + 10
    while connections_of(application_name) and time.monotonic() < deadline:
        time.sleep(0.05)
    return ended
