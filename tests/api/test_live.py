"""The API on a real Daphne (ASGI) with a Celery worker and the simulator driver: a launch with
an Idempotency-Key streams its progress over server-sent events until the lab runs; and the
docs page renders in Chromium with no Content-Security-Policy violation."""

from __future__ import annotations

import json
import urllib.request

import pytest

from api.scopes import SCOPES
from api.services import token_create
from tests.browser.conftest import browser_page  # noqa: F401 - fixture
from tests.browser.test_content_security_policy import LISTEN

pytestmark = [pytest.mark.slow]


def request(url: str, token: str, method: str = "GET", body: dict | None = None, headers: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    all_headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **(headers or {})}
    return urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=all_headers), timeout=30)


def test_a_launch_streams_its_progress_until_it_runs(world, portal_server, start_worker):
    start_worker()
    _token, token = token_create(institution=world["course"].institution, name="lms", scopes=list(SCOPES))
    body = {"course": world["course"].pk, "template": world["small"].slug, "student": world["students"][0].username}
    with request(f"{portal_server}/api/v1/sessions/", token, "POST", body, {"Idempotency-Key": "live-1"}) as response:
        assert response.status == 201
        session = json.load(response)
    with request(f"{portal_server}/api/v1/sessions/", token, "POST", body, {"Idempotency-Key": "live-1"}) as again:
        assert again.status == 200 and json.load(again)["id"] == session["id"]
    events = []
    with request(f"{portal_server}/api/v1/sessions/{session['id']}/progress", token) as stream:
        assert stream.headers["Content-Type"] == "text/event-stream"
        for line in stream:
            if line.startswith(b"data: "):
                events.append(json.loads(line[6:]))
    assert events[-1]["state"] == "running" and events[-1]["ready"], events
    assert [e["progress"] for e in events] == sorted(e["progress"] for e in events)


@pytest.mark.browser
def test_the_docs_page_renders_without_a_csp_violation(db, portal_server, browser_page):  # noqa: F811
    violations: list[str] = []
    browser_page.context.add_init_script(LISTEN)
    browser_page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    response = browser_page.goto(portal_server + "/api/v1/docs/")
    assert response is not None and "script-src 'self'" in response.headers["content-security-policy"]
    browser_page.wait_for_selector("text=/api/v1/courses/", timeout=20_000)
    browser_page.wait_for_load_state("networkidle")
    assert browser_page.evaluate("window.__csp") == [] and not violations
