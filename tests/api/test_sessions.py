"""Sessions through the API: launch on a student's behalf (idempotently), list with filters, stop, watch progress."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from api.models import IdempotencyKey
from labs.models import AuditEvent, LabSession
from labs.services.sessions import session_transition


def launch_body(world, student=0, template="small") -> dict:
    return {"course": world["course"].pk, "template": world[template].slug, "student": world["students"][student].username}


def test_it_launches_a_session_for_an_enrolled_student(api, world):
    response = api.call("POST", "/api/v1/sessions/", launch_body(world))
    assert response.status_code == 201, response.content
    session = LabSession.objects.get(pk=response.json()["id"])
    assert session.student == world["students"][0] and session.state == "queued"
    assert AuditEvent.objects.filter(action="session.launch", actor_name="api-token:uni-test/lms").count() == 1


def test_the_same_key_and_body_give_the_same_session(api, world):
    headers = {"Idempotency-Key": "lms-launch-1"}
    first = api.call("POST", "/api/v1/sessions/", launch_body(world), headers=headers)
    again = api.call("POST", "/api/v1/sessions/", launch_body(world), headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert LabSession.objects.count() == 1


def test_the_same_key_with_another_body_is_a_conflict(api, world):
    headers = {"Idempotency-Key": "lms-launch-2"}
    assert api.call("POST", "/api/v1/sessions/", launch_body(world), headers=headers).status_code == 201
    other = api.call("POST", "/api/v1/sessions/", launch_body(world, student=1), headers=headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    assert LabSession.objects.count() == 1


def test_a_refused_launch_says_why_and_keeps_no_key(api, world):
    headers = {"Idempotency-Key": "lms-launch-3"}
    assert api.call("POST", "/api/v1/sessions/", launch_body(world), headers=headers).status_code == 201
    # One session per student at a time: a second one for the same student with a new key is refused.
    refused = api.call("POST", "/api/v1/sessions/", launch_body(world, template="medium"), headers={"Idempotency-Key": "k4"})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "refused"
    assert "stop one first" in refused.json()["error"]["message"]
    assert not IdempotencyKey.objects.filter(key="k4").exists()


def test_unknown_course_template_or_student_is_invalid(api, world, elsewhere):
    body = {"course": world["course"].pk, "template": "nope", "student": "nobody"}
    response = api.call("POST", "/api/v1/sessions/", body)
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"template", "student"}
    assert LabSession.objects.count() == 0


def test_the_list_filters_by_course_student_and_state(api, world):
    for i in range(3):
        api.call("POST", "/api/v1/sessions/", launch_body(world, student=i))
    student = world["students"][1].username
    response = api.call("GET", f"/api/v1/sessions/?student={student}&state=queued&course={world['course'].pk}")
    assert response.status_code == 200
    assert [s["student"] for s in response.json()["results"]] == [student]
    assert api.call("GET", "/api/v1/sessions/?state=running").json()["count"] == 0
    assert api.call("GET", "/api/v1/sessions/?since=2000-01-01T00:00:00Z").json()["count"] == 3
    assert api.call("GET", "/api/v1/sessions/?state=bogus").status_code == 400


def test_stop_ends_a_queued_session(api, world):
    session_id = api.call("POST", "/api/v1/sessions/", launch_body(world)).json()["id"]
    response = api.call("POST", f"/api/v1/sessions/{session_id}/stop/")
    assert response.status_code == 200
    assert response.json()["state"] == "stopped"
    assert AuditEvent.objects.filter(action="session.stop").count() == 1
    assert api.call("POST", f"/api/v1/sessions/{session_id}/stop/").status_code == 200
    assert AuditEvent.objects.filter(action="session.stop").count() == 1


async def read_events(response) -> list[dict]:
    events = []
    async for chunk in response.streaming_content:
        for block in chunk.decode().split("\n\n"):
            if block.startswith("event: progress"):
                events.append(json.loads(block.split("data: ", 1)[1]))
    return events


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_progress_streams_until_the_session_runs(world, make_token, settings):
    settings.API_PROGRESS_POLL_SECONDS = 0.05
    token = await sync_to_async(make_token)(world["course"].institution)
    session = await sync_to_async(LabSession.objects.create)(
        student=world["students"][0], course=world["course"], template=world["small"], state="starting", secret="x"
    )
    response = await AsyncClient().get(f"/api/v1/sessions/{session.pk}/progress", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"

    async def run_soon():
        await sync_to_async(session_transition)(session.pk, to="running", access_url="http://lab.example/")

    runner = asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(run_soon()))
    events = await asyncio.wait_for(read_events(response), timeout=20)
    runner.cancel()
    assert events[0]["state"] == "starting" and not events[0]["ready"]
    assert events[-1]["state"] == "running" and events[-1]["ready"] and events[-1]["progress"] == 100


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_progress_ends_when_its_time_is_up(world, make_token, settings):
    settings.API_PROGRESS_POLL_SECONDS = 0.05
    settings.API_PROGRESS_MAX_SECONDS = 0.3
    token = await sync_to_async(make_token)(world["course"].institution)
    session = await sync_to_async(LabSession.objects.create)(
        student=world["students"][0], course=world["course"], template=world["small"], state="queued", secret="x"
    )
    response = await AsyncClient().get(f"/api/v1/sessions/{session.pk}/progress", headers={"Authorization": f"Bearer {token}"})

    events = await asyncio.wait_for(read_events(response), timeout=10)
    assert [e["state"] for e in events] == ["queued"]


def schema_validator(document: dict, component: str) -> Draft202012Validator:
    """A validator for one component of the served OpenAPI 3.1 document, its $refs resolved in it."""
    registry = Registry().with_resource("urn:api", Resource(document, DRAFT202012))
    return Draft202012Validator({"$ref": f"urn:api#/components/schemas/{component}"}, registry=registry)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_an_event_source_gets_the_stream_and_each_event_fits_the_schema(world, make_token, settings):
    """Every EventSource sends Accept: text/event-stream; each event's data is a ProgressEvent."""
    settings.API_PROGRESS_POLL_SECONDS = 0.05
    token = await sync_to_async(make_token)(world["course"].institution)
    session = await sync_to_async(LabSession.objects.create)(
        student=world["students"][0], course=world["course"], template=world["small"], state="running", secret="x"
    )
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    response = await AsyncClient().get(f"/api/v1/sessions/{session.pk}/progress", headers=headers)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    events = await asyncio.wait_for(read_events(response), timeout=10)
    assert [e["state"] for e in events] == ["running"]
    document = (await AsyncClient().get("/api/v1/schema/?format=json")).json()
    stream = document["paths"]["/api/v1/sessions/{session_id}/progress"]["get"]["responses"]["200"]["content"]
    assert stream["text/event-stream"]["schema"] == {"$ref": "#/components/schemas/ProgressStreamEvent"}
    envelope = schema_validator(document, "ProgressStreamEvent")
    for event in events:
        envelope.validate({"event": "progress", "data": json.dumps(event)})
        schema_validator(document, "ProgressEvent").validate(event)
    assert not schema_validator(document, "ProgressEvent").is_valid({**events[0], "progress": "100"})


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_progress_errors_are_json_whatever_the_accept_header(world, make_token):
    token = await sync_to_async(make_token)(world["course"].institution)
    unknown = "/api/v1/sessions/00000000-0000-0000-0000-000000000000/progress"
    missing = await AsyncClient().get(unknown, headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"})
    assert missing.status_code == 404 and missing["Content-Type"] == "application/json"
    assert missing.json()["error"]["code"] == "not_found"
    json_only = await AsyncClient().get(unknown, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    assert json_only.status_code == 406 and json_only.json()["error"]["code"] == "not_acceptable"


@pytest.mark.django_db(transaction=True)
def test_two_requests_with_one_key_at_once_launch_one_session(world, make_token):
    """The second waits for the first and answers with its session (not a refusal for the student's limit)."""
    import threading

    from django.db import connection as thread_connection

    from tests.api.conftest import TokenClient

    token = make_token(world["course"].institution)
    barrier, answers = threading.Barrier(2), []

    def post() -> None:
        try:
            barrier.wait()
            response = TokenClient(token).call(
                "POST", "/api/v1/sessions/", launch_body(world), headers={"Idempotency-Key": "race"}
            )
            answers.append((response.status_code, response.json().get("id")))
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=post) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(status for status, _id in answers) == [200, 201], answers
    assert len({session_id for _status, session_id in answers}) == 1
    assert LabSession.objects.count() == 1
