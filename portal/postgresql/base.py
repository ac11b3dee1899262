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
"""

from __future__ import annotations

import logging
import select

import psycopg
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)


class DatabaseWrapper(base.DatabaseWrapper):
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
