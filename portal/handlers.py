"""The portal's ASGI handler for HTTP: Django's, with each request's Django work in one trip to a thread.

Django's ``ASGIHandler`` runs its middleware chain in async mode. The portal's middlewares and
views are all sync, so every request went from the event loop to a worker thread for the chain,
back to the loop for the handler inside it, to the thread again for the view, and back up each
way (``portal.middleware.SyncMiddlewareChain`` had already cut the hops per middleware). Each
hop wakes a thread and waits for the loop, which under load shares the GIL with every other
request's thread. Here the chain is loaded in sync mode, as under WSGI, and run whole in one
``sync_to_async`` call: one hop there, one back. Everything else (reading the body, the
request signals, streaming responses, client disconnects) is Django's own.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler
from django.http import FileResponse


class SyncChainASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        base.BaseHandler.__init__(self)  # not ASGIHandler's: it loads the chain in async mode
        self.load_middleware(is_async=False)

    async def run_get_response(self, request):
        response = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size  # as Django's: the server chunks the file
        return response
