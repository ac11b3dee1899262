"""Django's PostgreSQL backend whose pooled connections survive a database restart.

A PostgreSQL restart or failover (or ``pg_terminate_backend``) ends every connection idle in a
process's pool, and the pool notices only when one is used: the next request on each answered
500. Django checks pooled connections only through psycopg_pool's own ``check``
(``CONN_HEALTH_CHECKS``), which, finding several dead ones in a row, waits 1 s, then 2, 4 …
between them: a request meeting eight dead connections waited 30 s (the pool's timeout) for a
500. Here each connection handed out is checked; the first dead one has the pool check every
idle connection at once (``ConnectionPool.check``: the dead ones are replaced) and a connection
is taken again.

The check asks the server nothing unless it has spoken: a server that ends a connection
(restart, failover, ``pg_terminate_backend``, a crash) sends its last message and closes it, and
the kernel holds that for the idle connection, so its socket is readable. One with nothing to
read is handed out as it is (an empty statement on each was a round trip and a transaction of
PostgreSQL's on every request); one with something waiting is checked with an empty statement.
A connection cut without a word (a network partition) is found by its first statement, as it was
by the empty one, and ``portal.middleware.LostConnectionRetry`` runs a request cut so again.

The web server and the workers use it alike (a prefork worker process closes its pool after
every task, Celery's Django fixup, so a worker meets dead pooled connections only with
``--pool solo`` or ``threads``).

Timestamps are read by psycopg's compiled loader. Django registers a loader of its own for
``timestamptz`` (``psycopg_any.BaseTzLoader``: psycopg's pure-Python parser, then the datetime's
zone replaced by Django's), which costs about ten times the compiled one, and the controller's
rounds and the sessions list read thousands of timestamps. Where Django's zone is UTC, as the
connection's is (Django sets it as it configures each connection), the compiled loader answers
the same datetimes with the same ``timezone.utc``; elsewhere Django's loader is kept.
"""

from __future__ import annotations

import logging
import select
from datetime import UTC
from functools import lru_cache

import psycopg
from django.db.backends.postgresql import base
from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from psycopg import adapters
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format
from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

TIMESTAMPTZ_OID = adapters.types["timestamptz"].oid
# psycopg's own text loader: compiled with psycopg[binary] or psycopg[c], else the Python one.
COMPILED_TIMESTAMPTZ = adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
IS_COMPILED = COMPILED_TIMESTAMPTZ.__module__.startswith(("psycopg_binary", "psycopg_c"))


class UtcTimestamptzLoader(Loader):
    """Django's ``timestamptz`` loader for its zone UTC, parsed by psycopg's compiled loader.

    ``timezone`` is what Django's ``create_cursor`` compares with its own before it registers its
    loader again on a cursor. A connection whose zone is not UTC (Django sets it on every
    connection it configures, so none here) gets Django's loader."""

    timezone = UTC

    def __init__(self, oid: int, context=None) -> None:
        super().__init__(oid, context)
        if self.connection is None or self.connection.info.timezone is UTC:
            self.load = COMPILED_TIMESTAMPTZ(oid, context).load  # the compiled method, no Python frame
        else:
            self.load = _DjangoUtcLoader(oid, context).load

    def load(self, data):  # replaced on each instance by __init__; the abstract method must exist
        raise NotImplementedError


class _DjangoUtcLoader(BaseTzLoader):
    timezone = UTC


@lru_cache
def with_compiled_timestamps(context: AdaptersMap) -> AdaptersMap:
    """Django's adapters template with ``UtcTimestamptzLoader`` for ``timestamptz`` where Django's
    loader there is for UTC and psycopg's is compiled; else the template as it is."""
    django_loader = context.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    if not IS_COMPILED or getattr(django_loader, "timezone", None) is not UTC:
        return context
    faster = AdaptersMap(context)
    faster.register_loader("timestamptz", UtcTimestamptzLoader)
    return faster


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        params = super().get_connection_params()
        if "context" in params:  # Django's adapters template (cached per time zone)
            params["context"] = with_compiled_timestamps(params["context"])
        return params

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        if self.pool is None or _alive(connection):
            return connection
        self.pool.putconn(connection)  # broken: the pool drops it and opens another
        logger.warning("a pooled database connection was closed by the server; checking the idle ones")
        self.pool.check()
        # Checked just now, or new: when this one fails too, the database is away and so is the request.
        return super().get_new_connection(conn_params)


def _alive(connection: psycopg.Connection) -> bool:
    if connection.closed or connection.broken:
        return False
    try:
        waiting = select.poll()
        waiting.register(connection.fileno(), select.POLLIN)
        if not waiting.poll(0):
            return True  # nothing from the server since the connection was last used
    except (OSError, ValueError, psycopg.Error):
        return False
    try:
        ConnectionPool.check_connection(connection)
    except psycopg.Error:
        return False
    return True
