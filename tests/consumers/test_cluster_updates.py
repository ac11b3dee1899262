"""The operators' cluster websocket over the real Redis channel layer."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from labs.consumers import ClusterConsumer
from labs.models import InstitutionRole
from labs.services.allocation import allocation_pass
from labs.services.operations import node_drain
from labs.services.sessions import session_launch

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def communicator(user):
    comm = WebsocketCommunicator(ClusterConsumer.as_asgi(), "/ws/cluster/")
    comm.scope["user"] = user
    return comm


@pytest.fixture
def async_world(transactional_db):
    from tests.factories import UserFactory, course_with_students, node_with_cards

    node = node_with_cards()
    course, templates, students, instructor = course_with_students(2)
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=course.institution, role="operator")
    return {
        "node": node,
        "course": course,
        "small": templates[0],
        "students": students,
        "instructor": instructor,
        "operator": operator,
    }


async def test_only_operators_may_listen(async_world):
    for user, code in ((AnonymousUser(), 4401), (async_world["instructor"], 4403), (async_world["students"][0], 4403)):
        comm = communicator(user)
        connected, close_code = await comm.connect()
        assert not connected and close_code == code


async def test_an_operator_hears_when_a_pass_places_sessions_and_when_a_node_is_drained(async_world):
    comm = communicator(async_world["operator"])
    connected, _ = await comm.connect()
    assert connected
    await sync_to_async(session_launch)(
        student=async_world["students"][0], course=async_world["course"], template=async_world["small"]
    )
    await sync_to_async(allocation_pass)()
    assert await comm.receive_json_from(timeout=5) == {"type": "cluster"}
    await sync_to_async(node_drain)(node=async_world["node"], by=async_world["operator"], reason="maintenance")
    assert await comm.receive_json_from(timeout=5) == {"type": "cluster"}
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()
