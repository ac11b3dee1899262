"""The controller's session-level lock when the server ends its connection inside the block."""

import threading

import pytest
from django.db import connection

from labs.services.locks import try_lock
from tests.served import POSTGRESQL_ONLY

pytestmark = [POSTGRESQL_ONLY, pytest.mark.django_db(transaction=True)]

KEY = 0x4E50_552D_5445_5354  # "NPU-TEST"


def in_another_thread(work):
    """Run ``work`` on a connection of its own (Django gives each thread one); return its result."""
    result = []

    def run():
        try:
            result.append(work())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    return result[0]


def held_elsewhere() -> bool:
    def attempt():
        with try_lock(KEY) as held:
            return held

    return not in_another_thread(attempt)


def test_a_connection_ended_inside_the_block_leaves_quietly_and_the_lock_goes_with_it(caplog):
    with try_lock(KEY) as held:
        assert held and held_elsewhere()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]

        def terminate():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
                return cursor.fetchone()[0]

        assert in_another_thread(terminate)
    # The block ended without an error, and the lock is free: for another process and for this one.
    assert "was lost" in caplog.text
    assert not held_elsewhere()
    with try_lock(KEY) as held:
        assert held


def test_the_lock_is_released_at_the_end_of_the_block():
    with try_lock(KEY) as held:
        assert held and held_elsewhere()
    assert not held_elsewhere()


def test_the_lock_and_the_pool_name_the_same_mark():
    """try_lock marks the connection; the pool's reset reads the mark by the same name."""
    from labs.services import locks
    from portal import env

    assert locks.SESSION_LOCKS_MARK == env.SESSION_LOCKS_MARK
