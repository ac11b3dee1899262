"""Middleware of the portal itself."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


class SyncMiddlewareChain:
    """Last in ``MIDDLEWARE``, doing nothing itself: it keeps every middleware in sync mode under ASGI.

    Django runs a middleware that can do both in the mode of the one below it. Below the last one
    is the ASGI handler, which is async, so without this every ``MiddlewareMixin`` middleware up
    to WhiteNoise (sync only) ran async, sending each of its ``process_request``,
    ``process_view`` and ``process_response`` hooks to the sync thread and back: about twenty
    thread hops a request, for views that are all sync anyway. With it the chain is sync, entered
    once (``bench.request_cost`` shows the difference). The same middlewares run in the same
    order, as in the sync mode the test client exercises.
    """

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)
