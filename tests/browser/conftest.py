"""Headless Chromium (Debian's package) driven by Playwright against a real ASGI server."""

from __future__ import annotations

import collections
import datetime

import pytest

from tests.conftest import LOG_TAIL_LINES, ON_FAILURE

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
        seen = PagesSeen()
        ON_FAILURE.append((f"browser: what its pages did, last {LOG_TAIL_LINES} events", seen.text))
        context = browser.new_context()
        context.on("page", seen.watch)
        page = context.new_page()
        browser.new_context = seen.watching(browser.new_context)  # a test's second user's pages too
        yield page
        context.close()
        browser.close()


class PagesSeen:
    """What a test's pages did, for its report if it fails: where they went, what their scripts
    logged or threw, their fetches' answers and their websockets' messages (each line timed, to
    read beside the workers' and Daphne's logs)."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.pages = 0

    def text(self) -> str:
        return "\n".join(self.lines)

    def note(self, page_number: int, what: str) -> None:
        now = datetime.datetime.now().strftime("%H:%M:%S.%f")[:-3]
        self.lines.append(f"{now} page {page_number}: {what[:400]}")

    def watching(self, new_context):
        """``browser.new_context`` whose pages are watched too."""

        def made(*args, **kwargs):
            context = new_context(*args, **kwargs)
            context.on("page", self.watch)
            return context

        return made

    def watch(self, page) -> None:
        self.pages += 1
        number = self.pages
        note = lambda what: self.note(number, what)  # noqa: E731
        page.on("framenavigated", lambda frame: frame == page.main_frame and note(f"at {frame.url}"))
        page.on("console", lambda message: note(f"console {message.type}: {message.text}"))
        page.on("pageerror", lambda error: note(f"error: {error}"))
        page.on("requestfailed", lambda request: note(f"failed {request.method} {request.url}: {request.failure}"))
        page.on(
            "response",
            lambda response: (
                response.request.resource_type in ("fetch", "xhr", "document")
                and note(f"{response.status} {response.request.method} {response.url}")
            ),
        )

        def socket(ws) -> None:
            note(f"websocket {ws.url}")
            ws.on("framereceived", lambda payload: note(f"websocket < {payload}"))
            ws.on("close", lambda _ws: note(f"websocket closed {ws.url}"))

        page.on("websocket", socket)
