"""portal.handlers: Django's ASGI handler with the middleware chain and the view in one trip to a thread."""

import asyncio

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
