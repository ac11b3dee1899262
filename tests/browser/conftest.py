"""Headless Chromium (Debian's package) driven by Playwright against a real ASGI server."""

from __future__ import annotations

import socket
import sys
import time
import urllib.request

import pytest

from tests.conftest import ServiceProcess, child_env

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerURL(str):
    """A base URL that also names the pid of the process serving it."""

    pid: int


@pytest.fixture
def portal_server(transactional_db, tmp_path):
    """daphne serving portal.asgi on a free port, on this test's database; yields its base URL
    (a ``ServerURL``: ``.pid`` is Daphne's)."""
    port = free_port()
    server = ServiceProcess(
        "web",
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
        child_env(),
        tmp_path,
    )
    url = ServerURL(f"http://127.0.0.1:{port}")
    url.pid = server.process.pid
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/accounts/login/", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or server.process.poll() is not None:
                server.stop()
                raise AssertionError(f"daphne did not start:\n{server.output()[-3000:]}") from None
            time.sleep(0.2)
    yield url
    server.stop()


@pytest.fixture
def browser_page(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; Django's documented escape hatch
    # lets the test keep using the ORM beside it (the server under test is another process).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        context = browser.new_context()
        page = context.new_page()
        yield page
        context.close()
        browser.close()
