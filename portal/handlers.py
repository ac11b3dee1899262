"""The portal's ASGI handler for HTTP: Django's, with each request's Django work in one trip to a
thread, and that thread one of a few kept for the next requests.

Django's ``ASGIHandler`` runs its middleware chain in async mode. The portal's middlewares and
views are all sync, so every request went from the event loop to a worker thread for the chain,
back to the loop for the handler inside it, to the thread again for the view, and back up each
way (``portal.middleware.SyncMiddlewareChain`` had already cut the hops per middleware). Each
hop wakes a thread and waits for the loop, which under load shares the GIL with every other
request's thread. Here the chain is loaded in sync mode, as under WSGI, and run whole in one
``sync_to_async`` call: one hop there, one back. The request's signals go in the same trip:
Django sent ``request_started`` (its receivers are sync: ``close_old_connections``) in a hop of
its own before the chain, and closed the response (``request_finished``) in another after
sending it. Here ``request_started`` is sent in the thread just before the chain and a response
whose content is in memory (not streamed) is closed there just after it, before the content
goes out; a streamed one (a file, an export) is closed after it has been sent, as Django does.
Everything else (reading the body, streaming, client disconnects) is Django's own.

Django also gives every request a new thread (``ThreadSensitiveContext()``: a new one-thread
executor, shut down when the request ends), and with a new thread come new per-thread objects:
the database connection's wrapper (its features, operations, introspection...), the
translation state. Started and torn down on every request, that was a third of what a trivial
page cost (docs/framework-overrides.md, "The ASGI handler"). Here a request takes an idle
one-thread executor, or makes one when all are busy, and gives it back when it ends, as a
threaded WSGI server reuses its threads: what a request leaves on its thread is what Django
already cleans up between requests (the database connection goes back to the pool on
``request_finished``; the locale middleware sets the language on every request). At most
``keep`` executors wait idle; one more is shut down.

A request takes its executor when it first sends a call to its thread (``_TakenOnFirstCall``), not
when it arrives: a page waiting at the gate below holds none, so a burst of requests does not start
threads (and shut them down again) beyond about twice those the gate lets run (a request gives its
thread back when it ends, after its answer has gone out). The ``sync_to_async`` wrapper of
the request's trip is built once, not per request (building one inspects the function: 3 % of a
web process's time under ``make load``).

At most ``slots`` requests are in their threads at once (``pool_slots()``: as many as the process's
database pool holds connections); the others wait on the event loop, where waiting costs nothing.
More threads than connections gained nothing: a request's thread that found none busy waited in
the pool for one (22 % of the time during a class start's burst), and every thread beyond a
connection was one more for the GIL to be handed between.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from concurrent.futures import Executor, ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse
from django.http.response import HttpResponseBase
from django.urls import set_script_prefix

IDLE_THREADS = 32


def pool_slots() -> int | None:
    """The connections of the default database's pool (``DATABASE_POOL_SIZE``); ``None`` without
    a pool (SQLite, or a pool size of 0): then no limit but the database's."""
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    return pool.get("max_size") if isinstance(pool, dict) else None


class SyncChainASGIHandler(ASGIHandler):
    def __init__(self, *, keep: int = IDLE_THREADS, slots: int | None = None) -> None:
        base.BaseHandler.__init__(self)  # not ASGIHandler's: it loads the chain in async mode
        self.load_middleware(is_async=False)
        self.keep = keep
        self.idle: list[ThreadPoolExecutor] = []  # touched only on the event loop: no lock
        self.slots = slots
        # One gate per event loop (a server has one; tests run several, one after another or at once).
        self.gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()
        self._respond_in_thread = sync_to_async(self._respond, thread_sensitive=True)

    def gate(self) -> contextlib.AbstractAsyncContextManager:
        """Held while a request is in its thread: at most ``slots`` at once on this event loop."""
        if self.slots is None:
            return contextlib.nullcontext()
        loop = asyncio.get_running_loop()
        gate = self.gates.get(loop)
        if gate is None:
            gate = self.gates[loop] = asyncio.Semaphore(self.slots)
        return gate

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        executor = _TakenOnFirstCall(self.idle)
        try:
            # asgiref waits for the thread's call to return even when the request is cancelled
            # (the client went away): the executor is free again when this block ends.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            if (taken := executor.taken) is not None:
                if len(self.idle) < self.keep:
                    self.idle.append(taken)
                else:
                    taken.shutdown(wait=False)

    async def handle(self, scope, receive, send):
        """Django's ``ASGIHandler.handle`` (5.2) with the signals in the request's one trip to its thread."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            await signals.request_started.asend(sender=self.__class__, scope=scope)
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return
        closed = []  # the thread appends once it has closed the response

        async def process_request(request, send):
            async with self.gate():
                response = await self._respond_in_thread(request, scope, closed)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while the response was being sent
            return response

        # As Django's: a client that goes away while the view runs cancels the request.
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request(request, send)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            if not closed:
                await signals.request_finished.asend(sender=self.__class__)
        else:
            if not closed:
                await sync_to_async(response.close)()  # streamed: closed once it has been sent
        body_file.close()

    def _respond(self, request, scope, closed: list) -> HttpResponseBase:
        """In the request's thread: ``request_started``, the chain and, for a response that is not
        streamed, its ``close()`` (``request_finished``: the database connection goes back)."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        response = self.get_response(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size  # as Django's: the server chunks the file
        if not response.streaming:
            response.close()
            closed.append(True)
        return response


class _TakenOnFirstCall(Executor):
    """A request's one-thread executor: one of the handler's idle ones (or a new one), taken when
    the request first sends a call to its thread, then every call of the request on it. On the
    event loop only (asgiref submits from there), like ``idle``."""

    def __init__(self, idle: list[ThreadPoolExecutor]) -> None:
        self.idle = idle
        self.taken: ThreadPoolExecutor | None = None

    def submit(self, fn, /, *args, **kwargs):
        if self.taken is None:
            self.taken = self.idle.pop() if self.idle else ThreadPoolExecutor(1, thread_name_prefix="portal-request")
        return self.taken.submit(fn, *args, **kwargs)
