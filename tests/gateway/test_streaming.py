"""A streamed answer goes through the gateway as the upstream sends it, under Daphne as the portal
is served: the first event reaches the client while the upstream is still writing the rest, and
the usage event (asked for upstream) is counted into the student's week."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from labs.devcluster.fake_openai import FakeOpenAI
from labs.models import CourseEndpoint, TokenUsage
from tests.conftest import wait_for
from tests.gateway.conftest import chat

TOKENS, DELAY = 6, 0.4  # the upstream takes 6 × 0.4 s = 2.4 s to finish


@pytest.fixture
def upstream():
    with FakeOpenAI(tokens=TOKENS, delay=DELAY) as server:
        yield server


def test_the_first_event_arrives_before_the_upstream_finishes(class_endpoint, upstream, portal_server):
    path, headers, body = chat(class_endpoint["endpoint"].pk, class_endpoint["key"], stream=True)
    arrivals = []
    events = []
    began = time.monotonic()
    with httpx.Client(base_url=portal_server, timeout=30) as http:
        with http.stream("POST", path, json=body, headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    arrivals.append(time.monotonic() - began)
                    events.append(line[6:])
    assert events[-1] == "[DONE]"
    # Buffered, the first event would come with the last, after the upstream's 2.4 s.
    assert arrivals[0] < TOKENS * DELAY / 2, arrivals
    assert arrivals[-1] - arrivals[0] > DELAY * (TOKENS - 2), arrivals
    usage = json.loads(events[-2])["usage"]
    sent, _headers = upstream.requests[0]
    assert sent["stream_options"] == {"include_usage": True}  # asked for though the client did not
    # Written once the last byte has gone out: the client may read before it is.
    rows = TokenUsage.objects.filter(course=class_endpoint["course"], student=class_endpoint["students"][0])
    row = wait_for(rows.first, timeout=10, message="the stream's tokens in the ledger")
    assert (row.requests, row.prompt_tokens, row.completion_tokens) == (1, usage["prompt_tokens"], TOKENS)


def test_a_client_that_asked_for_usage_keeps_its_other_stream_options(class_endpoint, upstream, portal_server):
    CourseEndpoint.objects.filter(pk=class_endpoint["endpoint"].pk).update(upstream_url=upstream.url)
    path, headers, body = chat(
        class_endpoint["endpoint"].pk,
        class_endpoint["key"],
        stream=True,
        stream_options={"include_usage": False, "continuous_usage_stats": False},
    )
    with httpx.Client(base_url=portal_server, timeout=30) as http:
        response = http.post(path, json=body, headers=headers)
    assert response.status_code == 200
    sent, _headers = upstream.requests[0]
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}


@pytest.fixture
def portal_server_env():
    return {"LOG_LEVEL": "DEBUG"}  # the server logs all it can: the key must be in none of it


def test_the_servers_access_log_and_logs_never_hold_the_key(class_endpoint, upstream, portal_server, tmp_path):
    key = class_endpoint["key"]
    path, headers, body = chat(class_endpoint["endpoint"].pk, key, stream=True)
    with httpx.Client(base_url=portal_server, timeout=30) as http:
        assert http.post(path, json=body, headers=headers).status_code == 200
        assert http.post(path, json=body, headers={"Authorization": f"Bearer {key}x"}).status_code == 401
        CourseEndpoint.objects.filter(pk=class_endpoint["endpoint"].pk).update(upstream_url="http://127.0.0.1:9/v1")
        assert http.post(path, json=body, headers=headers).status_code == 502
    log = wait_for(lambda: (text := (tmp_path / "web.log").read_text()) and "upstream unreachable" in text and text)
    assert f"/gateway/{class_endpoint['endpoint'].pk}/v1/chat/completions" in log  # the access log, with the path
    assert key.split("_", 2)[2] not in log
