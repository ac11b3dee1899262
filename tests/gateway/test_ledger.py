"""The tokens a response says it used go into the student's week of the ledger, per course."""

from __future__ import annotations

from labs.models import TokenUsage
from tests.asgi_client import AsgiClient
from tests.gateway.conftest import chat


def test_a_non_streamed_answers_usage_is_counted(class_endpoint, upstream):
    path, headers, body = chat(class_endpoint["endpoint"].pk, class_endpoint["key"])
    client = AsgiClient()
    usages = [client.request("POST", path, json=body, headers=headers).json()["usage"] for _ in range(2)]
    row = TokenUsage.objects.get(course=class_endpoint["course"], student=class_endpoint["students"][0])
    assert row.requests == 2
    assert row.prompt_tokens == sum(u["prompt_tokens"] for u in usages)
    assert row.completion_tokens == sum(u["completion_tokens"] for u in usages) == 10
    assert row.institution_id == class_endpoint["course"].institution_id


def test_a_completions_stream_is_counted_too(class_endpoint, upstream):
    headers = {"Authorization": f"Bearer {class_endpoint['key']}"}
    body = {"model": "fake-model", "prompt": "one two three", "stream": True}
    response = AsgiClient().request(
        "POST", f"/gateway/{class_endpoint['endpoint'].pk}/v1/completions", json=body, headers=headers
    )
    assert response.status_code == 200
    assert response.text.rstrip().endswith("data: [DONE]")
    row = TokenUsage.objects.get(course=class_endpoint["course"], student=class_endpoint["students"][0])
    assert (row.requests, row.completion_tokens) == (1, 5)
    assert row.prompt_tokens > 0


def test_models_are_listed_and_not_counted(class_endpoint, upstream):
    response = AsgiClient().get(
        f"/gateway/{class_endpoint['endpoint'].pk}/v1/models", headers={"Authorization": f"Bearer {class_endpoint['key']}"}
    )
    assert response.status_code == 200
    assert response.json()["data"][0]["id"] == "fake-model"
    assert not TokenUsage.objects.exists()


def test_an_unreachable_upstream_is_a_502_and_counts_nothing(class_endpoint, upstream):
    from labs.models import CourseEndpoint

    CourseEndpoint.objects.filter(pk=class_endpoint["endpoint"].pk).update(upstream_url="http://127.0.0.1:9/v1")
    path, headers, body = chat(class_endpoint["endpoint"].pk, class_endpoint["key"])
    response = AsgiClient().request("POST", path, json=body, headers=headers)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unavailable"
    assert not TokenUsage.objects.exists()
