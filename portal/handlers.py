"""The portal's ASGI handler for HTTP: Django's, with each request's Django work in one trip to a
thread, and that thread one of a few kept for the next requests.

Django's ``ASGIHandler`` runs its middleware chain in async mode. The portal's middlewares and
views are all sync, so every request went from the event loop to a worker thread for the chain,
back to the loop for the handler inside it, to the thread again for the view, and back up each
way (``portal.middleware.SyncMiddlewareChain`` had already cut the hops per middleware). Each
hop wakes a thread and waits for the loop, which under load shares the GIL with every other
request's thread. Here the chain is loaded in sync mode, as under WSGI, and run whole in one
``sync_to_async`` call: one hop there, one back. Everything else (reading the body, the
request signals, streaming responses, client disconnects) is Django's own.

Django also gives every request a new thread (``ThreadSensitiveContext()``: a new one-thread
executor, shut down when the request ends), and with a new thread come new per-thread objects:
the database connection's wrapper (its features, operations, introspection...), the
translation state. Started and torn down on every request that was ~1.6 ms of CPU, a third of
what a trivial page costs. Here a request takes an idle one-thread executor, or makes one when
all are busy, and gives it back when it ends, as a threaded WSGI server reuses its threads:
what a request leaves on its thread is what Django already cleans up between requests (the
database connection goes back to the pool on ``request_finished``; the locale middleware sets
the language on every request). At most ``keep`` executors wait idle; one more is shut down.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler
from django.http import FileResponse

IDLE_THREADS = 32


class SyncChainASGIHandler(ASGIHandler):
    def __init__(self, *, keep: int = IDLE_THREADS) -> None:
        base.BaseHandler.__init__(self)  # not ASGIHandler's: it loads the chain in async mode
        self.load_middleware(is_async=False)
        self.keep = keep
        self.idle: list[ThreadPoolExecutor] = []  # touched only on the event loop: no lock

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = self.idle.pop() if self.idle else ThreadPoolExecutor(1, thread_name_prefix="portal-request")
        try:
            # asgiref waits for the thread's call to return even when the request is cancelled
            # (the client went away): the executor is free again when this block ends.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            if len(self.idle) < self.keep:
                self.idle.append(executor)
            else:
                executor.shutdown(wait=False)

    async def run_get_response(self, request):
        response = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size  # as Django's: the server chunks the file
        return response
