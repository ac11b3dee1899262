"""The Celery worker's consumer, tuned for a portal whose labs wait while the broker is away.

Celery retries a lost broker connection after 2 s, then 4, 6 … up to 30 s (kombu's defaults for
``Connection.ensure_connection``, which Celery does not expose as settings). A Redis restart of a
few seconds then kept every worker away for up to that long again, and labs waited. This consumer
retries after 0.1 s, then every 0.2, 0.3 … 0.5 s: a worker is back within half a second of its
broker. While the broker is down that costs each worker two connection attempts a second, each
refused at once (or timed out by the transport's connect timeout).

Once back it sends the controller a run at once: the wakes of the launches and stops made while
the broker was away were lost, and what waited (sessions to admit, start or stop) should not wait
for beat's next tick as well.
Chosen with ``CELERY_WORKER_CONSUMER`` (Celery's documented ``worker_consumer`` setting).
"""

from __future__ import annotations

from functools import partial

from celery.worker.consumer import Consumer

from labs import dispatch

RETRY_INTERVAL_START = 0.1
RETRY_INTERVAL_STEP = 0.1
RETRY_INTERVAL_MAX = 0.5


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

    def connect(self):
        connection = super().connect()
        if self.restart_count > 0:  # connected again after the connection was lost (the first start is 0)
            dispatch.send(dispatch.CONTROLLER_TASK)
        return connection
