"""Middleware of the portal itself."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse


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
