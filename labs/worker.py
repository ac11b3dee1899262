"""The Celery worker's consumer, tuned for a portal whose controller must notice a broker that is back.

Celery retries a lost broker connection after 2 s, then 4, 6 … up to 30 s (kombu's defaults, which
Celery does not expose as settings). A Redis restart of a few seconds then keeps every worker away
for up to twice as long again, and labs wait. This consumer retries every 0.5 s, growing to 2 s:
the cost is a connection attempt per worker per half second while the broker is down.
Chosen with ``CELERY_WORKER_CONSUMER`` (Celery's documented ``worker_consumer`` setting).
"""

from __future__ import annotations

from functools import partial

from celery.worker.consumer import Consumer

RETRY_INTERVAL_START = 0.5
RETRY_INTERVAL_STEP = 0.5
RETRY_INTERVAL_MAX = 2.0


class PromptConsumer(Consumer):
    def ensure_connected(self, conn):
        conn.ensure_connection = partial(
            type(conn).ensure_connection,
            conn,
            interval_start=RETRY_INTERVAL_START,
            interval_step=RETRY_INTERVAL_STEP,
            interval_max=RETRY_INTERVAL_MAX,
        )
        return super().ensure_connected(conn)
