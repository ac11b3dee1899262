"""portal.handlers: Django's ASGI handler with the middleware chain and the view in one trip to a thread."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.testing import ApplicationCommunicator

from portal.handlers import SyncChainASGIHandler


def request(app, path: str, *, method: str = "GET") -> tuple[dict, bytes]:
    async def run():
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"testserver")],
            "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80),
        }
        communicator = ApplicationCommunicator(app, scope)
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await communicator.receive_output(timeout=10)
        body = b""
        while True:
            message = await communicator.receive_output(timeout=10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await communicator.wait(timeout=10)
        return start, body

    return asyncio.run(run())


def test_the_portal_serves_http_with_the_whole_chain_in_sync_mode():
    import portal.asgi

    app = portal.asgi.application.application_mapping["http"]
    assert isinstance(app, SyncChainASGIHandler)
    assert not asyncio.iscoroutinefunction(app._middleware_chain)


@pytest.mark.django_db(transaction=True)
def test_a_page_goes_through_every_middleware_and_the_view():
    start, body = request(SyncChainASGIHandler(), "/accounts/login/")

    assert start["status"] == 200
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    assert "content-security-policy" in headers  # django-csp's middleware ran
    assert "csrftoken" in headers.get("set-cookie", "")  # the CSRF middleware, for the form
    assert b'name="csrfmiddlewaretoken"' in body


@pytest.mark.django_db(transaction=True)
def test_a_missing_page_and_a_refused_method_answer_as_django_does():
    assert request(SyncChainASGIHandler(), "/no-such-page/")[0]["status"] == 404
    assert request(SyncChainASGIHandler(), "/sessions/launch/")[0]["status"] in (302, 405)


# --- threads kept for the next requests ------------------------------------------------------------------

seen: list[tuple[int, bool]] = []  # (thread, whether the thread had an open database connection on entry)


def thread_view(request):
    import threading

    from django.db import connection
    from django.http import HttpResponse

    seen.append((threading.get_ident(), connection.connection is not None))
    from django.contrib.auth import get_user_model

    get_user_model().objects.exists()  # the request uses the database
    return HttpResponse("ok")


urlpatterns = []  # filled below: this module is the URLconf of the tests that follow


def _urls():
    from django.urls import path

    return [path("thread/", thread_view)]


@pytest.fixture
def thread_urls(settings):
    urlpatterns[:] = _urls()
    settings.ROOT_URLCONF = __name__
    seen.clear()


def requests_at_once(app, n: int) -> list[int]:
    """``n`` requests whose views overlap (each waits for the others inside the view)."""
    import threading

    barrier = threading.Barrier(n, timeout=10)

    def view(request):
        from django.http import HttpResponse

        seen.append((threading.get_ident(), False))
        barrier.wait()
        return HttpResponse("ok")

    from django.urls import path

    urlpatterns[:] = [path("thread/", view), path("one/", thread_view)]
    assert request(app, "/one/")[0]["status"] == 200  # one thread kept: one of the n must not reuse it while busy
    seen.clear()

    async def run():
        return await asyncio.gather(*(asyncio.to_thread(request, app, "/thread/") for _ in range(n)))

    return [start["status"] for start, _ in asyncio.run(run())]


@pytest.mark.django_db(transaction=True)
def test_requests_one_after_another_run_on_one_kept_thread_and_leave_no_connection_open(thread_urls):
    app = SyncChainASGIHandler()
    for _ in range(3):
        assert request(app, "/thread/")[0]["status"] == 200

    assert len({thread for thread, _ in seen}) == 1
    # Each request found the thread without a database connection: request_finished gave the
    # previous one back to the pool (CONN_MAX_AGE 0) on the same thread.
    assert [connected for _, connected in seen] == [False, False, False]
    assert len(app.idle) == 1


@pytest.mark.django_db(transaction=True)
def test_requests_at_once_get_threads_of_their_own_and_at_most_keep_of_them_wait_idle(thread_urls):
    app = SyncChainASGIHandler(keep=2)

    assert requests_at_once(app, 4) == [200] * 4

    assert len({thread for thread, _ in seen}) == 4  # a busy thread is never given a second request
    assert len(app.idle) == 2  # the other two were shut down


# --- the request's signals in its one trip to the thread ---------------------------------------------------

events: list[tuple[str, int]] = []  # (what, thread)


def _record(what: str):
    import threading

    def receiver(**kwargs):
        events.append((what, threading.get_ident()))

    return receiver


@pytest.fixture
def signal_urls(settings):
    import threading

    from django.core import signals
    from django.http import HttpResponse, StreamingHttpResponse
    from django.urls import path

    def page(request):
        events.append(("view", threading.get_ident()))
        return HttpResponse("ok")

    def streamed(request):
        events.append(("view", threading.get_ident()))

        def chunks():
            for part in ("a", "b", "c"):
                events.append((f"chunk {part}", threading.get_ident()))
                yield part

        return StreamingHttpResponse(chunks())

    urlpatterns[:] = [path("page/", page), path("streamed/", streamed)]
    settings.ROOT_URLCONF = __name__
    events.clear()
    started, finished = _record("request_started"), _record("request_finished")
    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    yield
    signals.request_started.disconnect(started)
    signals.request_finished.disconnect(finished)


class CountingExecutor(ThreadPoolExecutor):
    """A request's one-thread executor that counts the calls sent to its thread (the trips)."""

    def __init__(self):
        super().__init__(1)
        self.trips = 0

    def submit(self, *args, **kwargs):
        self.trips += 1
        return super().submit(*args, **kwargs)


@pytest.mark.django_db(transaction=True)
def test_a_page_s_signals_are_sent_once_each_in_its_one_trip_to_its_thread(signal_urls):
    app = SyncChainASGIHandler()
    app.idle.append(executor := CountingExecutor())
    start, body = request(app, "/page/")

    assert (start["status"], body) == (200, b"ok")
    assert [what for what, _ in events] == ["request_started", "view", "request_finished"]
    assert len({thread for _, thread in events}) == 1  # the signals ran where the view did
    assert executor.trips == 1  # Django's handler made three: request_started, the chain, close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume synchronous iterators")
def test_a_streamed_response_is_closed_once_after_all_of_it_has_been_sent(signal_urls):
    app = SyncChainASGIHandler()
    start, body = request(app, "/streamed/")

    assert (start["status"], body) == (200, b"abc")
    assert [what for what, _ in events] == ["request_started", "view", "chunk a", "chunk b", "chunk c", "request_finished"]


# --- no more requests in their threads than the database pool has connections ------------------------------


def _statuses_at_once(app, path: str, n: int) -> list[int]:
    """``n`` GETs of ``path`` sent to ``app`` at once on one event loop; their statuses."""

    async def one() -> int:
        communicator = ApplicationCommunicator(app, _scope(path))
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await communicator.receive_output(timeout=10)
        await communicator.receive_output(timeout=10)
        await communicator.wait(timeout=10)
        return start["status"]

    async def at_once() -> list[int]:
        return await asyncio.gather(*(one() for _ in range(n)))

    return asyncio.run(at_once())


def _scope(path: str) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
    }  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_requests_beyond_the_slots_wait_on_the_event_loop_not_in_threads(settings):
    import threading
    import time

    from django.http import HttpResponse
    from django.urls import path

    inside, most = [0], [0]
    lock = threading.Lock()

    def view(request):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.1)
        with lock:
            inside[0] -= 1
        return HttpResponse("ok")

    urlpatterns[:] = [path("slow/", view)]
    settings.ROOT_URLCONF = __name__
    app = SyncChainASGIHandler(slots=2)

    assert _statuses_at_once(app, "/slow/", 6) == [200] * 6
    assert most[0] == 2


@pytest.mark.django_db(transaction=True)
def test_requests_waiting_for_a_slot_hold_no_thread(settings):
    import threading
    import time

    from django.http import HttpResponse
    from django.urls import path

    threads = set()

    def view(request):
        threads.add(threading.get_ident())
        time.sleep(0.05)
        return HttpResponse("ok")

    urlpatterns[:] = [path("slow/", view)]
    settings.ROOT_URLCONF = __name__
    app = SyncChainASGIHandler(slots=2, keep=8)

    assert _statuses_at_once(app, "/slow/", 8) == [200] * 8
    # Each took its thread when it got a slot: the two that ran, and two more taken by the next two
    # while the first two's answers were going out (their threads are given back when a request
    # ends). A thread taken on arrival made eight.
    assert len(threads) <= 2 * 2
    assert len(app.idle) == len(threads)


def test_the_slots_are_the_connections_of_the_database_pool(settings):
    import portal.asgi
    from portal.env import env_database
    from portal.handlers import pool_slots

    app = portal.asgi.application.application_mapping["http"]
    assert app.slots == pool_slots()
    settings.DATABASES = {"default": env_database("X", "postgres://u:p@127.0.0.1:5432/db", pool_size=lambda: 7)}
    assert pool_slots() == 7
    settings.DATABASES = {"default": env_database("X", "postgres://u:p@127.0.0.1:5432/db", pool_size=lambda: 0)}
    assert pool_slots() is None  # no pool: a connection per request, no limit but the database's
    settings.DATABASES = {"default": env_database("X", "sqlite:///tmp/x.sqlite3", pool_size=lambda: 7)}
    assert pool_slots() is None
