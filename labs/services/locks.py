"""The lock that makes the allocation pass the one authority at a time, and the locks that keep
the controller and the node recheck to one run at a time."""

import contextlib
import logging
from collections.abc import Iterator

from django.db import DatabaseError, connection

logger = logging.getLogger(__name__)

# The attribute of a psycopg connection that says it may hold session-level advisory locks
# (portal.env.SESSION_LOCKS_MARK, the same name: apps do not import the project).
SESSION_LOCKS_MARK = "_portal_session_locks"

# An arbitrary constant: the advisory-lock key of the allocation pass ("NPU-ALOC" in ASCII hex).
ALLOCATION_LOCK_KEY = 0x4E50_552D_414C_4F43
# The lifecycle controller's session-level advisory lock ("NPU-CTRL").
CONTROLLER_LOCK_KEY = 0x4E50_552D_4354_524C
# The quick check of unavailable nodes ("NPU-RCHK"): one at a time, so a hung agent, which makes
# each check wait its whole timeout, never holds more than one worker.
RECHECK_LOCK_KEY = 0x4E50_552D_5243_484B
# Quota changes ("NPU-GRNT"): a guarantee is checked against the sum of the others, so two changes
# checked at once could each fit alone and together overcommit the cluster.
GUARANTEE_LOCK_KEY = 0x4E50_552D_4752_4E54


def wait_for_xact_lock(key: int) -> None:
    """Wait for the transaction-level advisory lock ``key``; it is held until the transaction ends.

    PostgreSQL only; SQLite (the embedded demo) serialises its writers itself.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


@contextlib.contextmanager
def try_lock(key: int) -> Iterator[bool]:
    """Hold the session-level advisory lock ``key`` for the block, or yield ``False`` at once when
    another process has it.

    PostgreSQL: released at the end of the block, or with the connection of a worker that dies.
    When the release itself fails (the server ended the connection after the block's last
    statement: a restart or failover), the lock went with that connection; the connection is
    closed, so a pool never hands out a session that might still hold it.
    SQLite (the embedded demo): its write lock already serialises the writes, and what these
    locks guard is idempotent, so nothing more is taken.
    """
    if connection.vendor != "postgresql":
        yield True
        return
    with connection.cursor() as cursor:
        # Marked before the lock is asked for: a pooled connection so marked is given back
        # without session-level locks (portal.env._release_session_locks reads the mark), the
        # others without that round trip.
        setattr(connection.connection, SESSION_LOCKS_MARK, True)
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        held = cursor.fetchone()[0]
    try:
        yield held
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            except DatabaseError:
                logger.warning("the database connection holding lock %#x was lost; closing it", key)
                _close_for_good()


def _close_for_good() -> None:
    """Close this thread's connection so that it is not reused: a pool discards a closed one."""
    raw = connection.connection
    if raw is not None:
        with contextlib.suppress(Exception):
            raw.close()
    with contextlib.suppress(DatabaseError):
        connection.close()


def allocation_lock() -> None:
    """Hold the allocation lock until the current transaction ends.

    PostgreSQL: a transaction-level advisory lock, so passes in other processes and on other
    machines wait, and a crashed process releases it with its connection. SQLite: every
    transaction already begins IMMEDIATE (see ``portal.env.env_database``), which takes the
    database's single write lock, so there is nothing more to take.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("allocation_lock() must be called inside transaction.atomic()")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ALLOCATION_LOCK_KEY])


# Bookings of class reservations, one at a time ("NPU-RESV"): two bookings checked at once
# could each fit beside the other's absence.
RESERVATION_LOCK_KEY = 0x4E50_552D_5245_5356


def reservation_lock() -> None:
    """Hold the bookings lock until the current transaction ends (as ``allocation_lock``)."""
    if not connection.in_atomic_block:
        raise RuntimeError("reservation_lock() must be called inside transaction.atomic()")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [RESERVATION_LOCK_KEY])
