"""The websocket consumer over the real Redis channel layer."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from labs.consumers import SessionUpdatesConsumer
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_transition

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def communicator(user, query=""):
    comm = WebsocketCommunicator(SessionUpdatesConsumer.as_asgi(), f"/ws/sessions/{query}")
    comm.scope["user"] = user
    if query:
        comm.scope["query_string"] = query.lstrip("?").encode()
    return comm


@pytest.fixture
def async_world(transactional_db):
    from tests.factories import course_with_students, node_with_cards

    node_with_cards()
    course, templates, students, instructor = course_with_students(2)
    return {"course": course, "small": templates[0], "students": students, "instructor": instructor}


async def receive_states(comm, count):
    """The next ``count`` session payloads, from as many batched messages as they come in."""
    events = []
    while len(events) < count:
        message = await comm.receive_json_from(timeout=5)
        assert message["type"] == "sessions"
        events.extend(message["sessions"])
    return [(e["state"], e["version"]) for e in events], events


async def test_a_student_receives_each_state_change_of_their_session(async_world):
    student = async_world["students"][0]
    comm = communicator(student)
    connected, _ = await comm.connect()
    assert connected
    session = await sync_to_async(session_launch)(student=student, course=async_world["course"], template=async_world["small"])
    await sync_to_async(allocation_pass)()
    await sync_to_async(session_transition)(session.pk, to="starting")
    await sync_to_async(session_transition)(session.pk, to="running", access_url="http://lab/?token=t")
    # The launch itself is not published (the launching page has it from the response); the
    # allocation pass that admits it is.
    states, events = await receive_states(comm, 3)
    assert states == [("admitted", 2), ("starting", 3), ("running", 4)]
    assert events[-1]["access_url"] == "http://lab/?token=t"
    await comm.disconnect()


@pytest.mark.slow
async def test_an_idle_socket_still_receives_updates_after_some_seconds(async_world):
    """channels-redis waits on blocking Redis reads; a client socket timeout must not end it."""
    import asyncio

    student = async_world["students"][0]
    comm = communicator(student)
    await comm.connect()
    await asyncio.sleep(7)  # the subject: idle for longer than a client socket timeout would allow
    await sync_to_async(session_launch)(student=student, course=async_world["course"], template=async_world["small"])
    await sync_to_async(allocation_pass)()
    states, _ = await receive_states(comm, 1)
    assert states == [("admitted", 2)]
    await comm.disconnect()


async def test_the_instructor_sees_course_sessions_without_the_secret_url(async_world):
    comm = communicator(async_world["instructor"], f"?course={async_world['course'].pk}")
    connected, _ = await comm.connect()
    assert connected
    session = await sync_to_async(session_launch)(
        student=async_world["students"][1], course=async_world["course"], template=async_world["small"]
    )
    await sync_to_async(allocation_pass)()
    await sync_to_async(session_transition)(session.pk, to="starting")
    await sync_to_async(session_transition)(session.pk, to="running", access_url="http://lab/?token=secret")
    states, events = await receive_states(comm, 3)
    assert states[-1] == ("running", 4)
    assert all(e["access_url"] == "" for e in events)
    await comm.disconnect()


async def test_a_student_does_not_receive_other_students_sessions(async_world):
    comm = communicator(async_world["students"][0])
    await comm.connect()
    await sync_to_async(session_launch)(
        student=async_world["students"][1], course=async_world["course"], template=async_world["small"]
    )
    await sync_to_async(allocation_pass)()
    assert await comm.receive_nothing(timeout=1)
    await comm.disconnect()


async def test_an_anonymous_socket_is_closed(async_world):
    comm = communicator(AnonymousUser())
    connected, code = await comm.connect()
    assert not connected and code == 4401


async def test_a_student_cannot_listen_to_a_course_they_do_not_teach(async_world):
    comm = communicator(async_world["students"][0], f"?course={async_world['course'].pk}")
    connected, code = await comm.connect()
    assert not connected and code == 4403


async def test_a_reason_reaches_the_page_in_words_with_its_code(async_world):
    student = async_world["students"][0]
    comm = communicator(student)
    await comm.connect()
    async_world["course"].quota.instance_count = 0
    await sync_to_async(async_world["course"].quota.save)(update_fields=["instance_count"])
    await sync_to_async(session_launch)(student=student, course=async_world["course"], template=async_world["small"])
    await sync_to_async(allocation_pass)()
    _, events = await receive_states(comm, 1)
    assert events[0]["state_label"] == "failed"
    assert events[0]["reason_code"] == "quota.ceiling_instances"
    assert events[0]["reason"] == "course quota: the course's guarantee allows no instances"
    await comm.disconnect()


async def test_a_group_message_does_not_send_the_socket_to_the_database_thread_but_connecting_does(async_world, monkeypatch):
    import channels.consumer

    trips = []
    real = channels.consumer.aclose_old_connections

    async def counted():
        trips.append(1)
        await real()

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    student = async_world["students"][0]
    comm = communicator(student)
    assert (await comm.connect())[0]
    assert len(trips) == 1  # before the connect handler, which may read the database (?course=)
    session = await sync_to_async(session_launch)(student=student, course=async_world["course"], template=async_world["small"])
    await sync_to_async(allocation_pass)()

    states, _ = await receive_states(comm, 1)

    assert states == [("admitted", 2)] and session is not None
    assert len(trips) == 1  # the update went straight to the socket
    await comm.disconnect()
