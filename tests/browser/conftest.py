"""Headless Chromium (Debian's package) driven by Playwright against a real ASGI server."""

from __future__ import annotations

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
]


@pytest.fixture
def browser_page(monkeypatch):
    yield from chromium_page(monkeypatch)


def chromium_page(monkeypatch, extra_args: tuple[str, ...] = ()):
    """A page of a fresh headless Chromium (``CHROMIUM_ARGS`` and ``extra_args``), for a fixture to yield from."""
    # Playwright's sync API runs an event loop in this thread; Django's documented escape hatch
    # lets the test keep using the ORM beside it (the server under test is another process).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args], headless=True)
        context = browser.new_context()
        page = context.new_page()
        yield page
        context.close()
        browser.close()
