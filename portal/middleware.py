"""Middleware of the portal itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse

logger = logging.getLogger(__name__)


class SyncMiddlewareChain:
    """Last in ``MIDDLEWARE``, doing nothing itself: it keeps every middleware in sync mode under Django's async handlers.

    Django runs a middleware that can do both in the mode of the one below it. Below the last one
    is the handler; under an async one (Django's ``ASGIHandler``, the test ``AsyncClient`` that
    ``bench.request_cost`` uses) every ``MiddlewareMixin`` middleware up to WhiteNoise (sync
    only) would run async, sending each of its hooks to the sync thread and back: about twenty
    thread hops a request, for views that are all sync anyway. With it the chain is sync,
    entered once. Daphne serves the portal through ``portal.handlers.SyncChainASGIHandler``,
    whose chain is sync from the start; there it changes nothing.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)


class LostConnectionRetry:
    """A request whose database connection dies under it, before it wrote anything, is run again.

    A PostgreSQL restart, failover or ``pg_terminate_backend`` ends the connections in use, and
    the request on each answered 500 although nothing of it had happened (pooled connections
    are checked as they are handed out, ``portal.postgresql``; this is the one cut mid-request).
    The view is called again on a new connection when the error is an ``OperationalError`` or
    ``InterfaceError`` (the connection lost or ended by the server; also a deadlock or a cancelled
    statement, as safe to run again) and the request had written nothing: no data-changing statement outside a
    transaction and no transaction with one that committed (a transaction the cut interrupted
    was rolled back by the server). The first run again is at once; a request cut again waits
    longer each time (``PAUSES``), so a server that ends every connection for a few seconds (a
    failover that flaps, ``pg_terminate_backend`` in a loop) is waited out rather than raced, for
    up to ``RETRY_FOR`` seconds from the first cut; then the 500 it was.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        writes = _Writes()
        request._database_writes = writes  # type: ignore[attr-defined]
        with connection.execute_wrapper(writes):
            return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        writes = getattr(request, "_database_writes", None)
        if writes is None or writes.done or not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        # OperationalError: the connection lost, the server shutting down, a deadlock or a
        # serialization failure, a cancelled statement; nothing the request did can be half-done.
        now = time.monotonic()
        if writes.first_cut is None:
            writes.first_cut = now
        pause = PAUSES[min(writes.retries, len(PAUSES) - 1)]
        if now + pause - writes.first_cut > RETRY_FOR:
            return None
        writes.retries += 1
        logger.warning(
            "database connection lost in %s %s before anything was written: run again (%d) in %.1f s",
            request.method,
            request.path,
            writes.retries,
            pause,
        )
        connection.close()
        time.sleep(pause)
        match = request.resolver_match
        try:
            return match.func(request, *match.args, **match.kwargs)
        except Exception as again:  # noqa: BLE001 (the same rule for the next try, else the 500 it is)
            response = self.process_exception(request, again)
            if response is None:
                raise
            return response


# The pause before each run again: the first at once (one cut connection), then longer, the
# last repeated; no run starts later than RETRY_FOR seconds after the first cut.
PAUSES = (0.0, 0.1, 0.25, 0.5, 1.0)
RETRY_FOR = 8.0
# Statements that change nothing a retry could repeat.
_READS = ("SELECT", "SAVEPOINT", "RELEASE", "ROLLBACK", "SHOW", "SET ", "BEGIN")


class _Writes:
    """Execute wrapper: whether the request has written anything that may have been committed."""

    def __init__(self) -> None:
        self.done = False
        self.retries = 0
        self.first_cut: float | None = None

    def __call__(self, execute, sql, params, many, context):
        if not sql.lstrip()[:10].upper().startswith(_READS):
            db = context["connection"]
            if db.in_atomic_block:
                db.on_commit(self._committed)  # written when (if) its transaction commits
            else:
                self.done = True  # autocommit: it may be written as soon as it is sent
        return execute(sql, params, many, context)

    def _committed(self) -> None:
        self.done = True
