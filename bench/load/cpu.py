"""The CPU a request costs its web process's request thread, sent back in a response header (bench settings only).

``bench.load`` serves the portal with ``bench.load.settings``: the portal's settings with the
trivial view of ``bench.request_cost`` at ``/bench/floor/`` and this middleware first. Under
Daphne the whole middleware chain and the view run in one thread (``portal.middleware.SyncMiddlewareChain``),
so ``time.thread_time()`` around it is what the request cost in that thread: every middleware,
the view, its queries' client side, the template. What runs on the event loop (the ASGI server,
the websocket consumers, the publish after a commit) is not in it; ``bench.load`` measures
that as the rest of the Daphne processes' CPU (``/proc``) and shares it out.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from bench.load.plan import CPU_HEADER


class RequestThreadCpu:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        began = time.thread_time_ns()
        response = self.get_response(request)
        response[CPU_HEADER] = str((time.thread_time_ns() - began) // 1000)
        return response
