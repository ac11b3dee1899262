"""A web process whose Redis subscription was lost and is back tells its sockets to read again.

Over the real Redis: the test kills the process's subscribing connection on the server
(``CLIENT KILL ADDR``), as a Redis restart or a network blip would, and redis-py connects and
subscribes again by itself (``portal.channel_layer``).
"""

import asyncio

import pytest
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings

from labs.consumers import ClusterConsumer, SessionUpdatesConsumer
from labs.models import InstitutionRole
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from portal.channel_layer import RESUBSCRIBED, ResyncingPubSubChannelLayer
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio


def prefix(name: str) -> str:
    """A channel prefix of this run's own (Pub/Sub channels are not per Redis database)."""
    return f"{settings.CHANNEL_LAYERS['default']['CONFIG']['prefix']}-{name}"


async def kill_subscriber(layer) -> None:
    """Close this process's subscribing connection(s) of ``layer`` from the Redis server's side."""
    shards = layer._get_layer()._shards
    addresses = [shard._pubsub.connection._writer.get_extra_info("sockname") for shard in shards]
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        for host, port in addresses:
            assert await client.client_kill_filter(_id=None, addr=f"{host}:{port}") == 1
    finally:
        await client.aclose()


async def subscribed(layer, group: str) -> bool:
    """Whether Redis has a subscriber to ``group``'s channel of ``layer`` (``PUBSUB NUMSUB``)."""
    name = layer._get_layer()._get_group_channel_name(group)
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        ((_, count),) = await client.pubsub_numsub(name)
    finally:
        await client.aclose()
    return count > 0


async def test_the_layer_puts_one_resubscribed_message_in_every_channel_and_groups_work_again():
    layer = ResyncingPubSubChannelLayer(
        hosts=[settings.REDIS_URL], prefix=f"{settings.CHANNEL_LAYERS['default']['CONFIG']['prefix']}-resync"
    )
    sockets = [await layer.new_channel() for _ in range(2)]
    for channel in sockets:
        await layer.group_add("resync.test", channel)
    await layer.group_send("resync.test", {"type": "before"})
    for channel in sockets:
        assert (await asyncio.wait_for(layer.receive(channel), 5))["type"] == "before"

    await kill_subscriber(layer)
    for channel in sockets:  # redis-py reads again within 0.1 s, finds the connection gone, connects
        assert await asyncio.wait_for(layer.receive(channel), 10) == {"type": RESUBSCRIBED}
    await layer.group_send("resync.test", {"type": "after"})  # subscribed to the group again
    for channel in sockets:
        assert (await asyncio.wait_for(layer.receive(channel), 5))["type"] == "after"
    await layer.flush()


async def test_channels_redis_own_layer_says_nothing_after_the_same_loss():
    """Why the layer exists: without it the sockets never hear that they may have missed something."""
    layer = RedisPubSubChannelLayer(
        hosts=[settings.REDIS_URL], prefix=f"{settings.CHANNEL_LAYERS['default']['CONFIG']['prefix']}-plain"
    )
    channel = await layer.new_channel()
    await layer.group_add("resync.plain", channel)
    await kill_subscriber(layer)
    await eventually(lambda: subscribed(layer, "resync.plain"), timeout=10, message="the group subscribed again")
    await layer.group_send("resync.plain", {"type": "after"})
    assert (await asyncio.wait_for(layer.receive(channel), 5))["type"] == "after"  # the first thing it hears
    await layer.flush()


@pytest.fixture
def async_world(transactional_db):
    from tests.factories import UserFactory, course_with_students, node_with_cards

    node_with_cards()
    course, templates, students, _instructor = course_with_students(1)
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=course.institution, role="operator")
    return {"course": course, "small": templates[0], "student": students[0], "operator": operator}


@pytest.mark.django_db(transaction=True)
async def test_a_students_page_is_told_to_read_again_and_then_hears_updates_as_before(async_world):
    student = async_world["student"]
    comm = WebsocketCommunicator(SessionUpdatesConsumer.as_asgi(), "/ws/sessions/")
    comm.scope["user"] = student
    assert (await comm.connect())[0]

    await kill_subscriber(get_channel_layer())
    assert await comm.receive_json_from(timeout=10) == {"type": "resync"}
    session = await sync_to_async(session_launch)(student=student, course=async_world["course"], template=async_world["small"])
    await sync_to_async(allocation_pass)()
    message = await comm.receive_json_from(timeout=5)
    assert message["type"] == "sessions" and message["sessions"][0]["id"] == str(session.pk)
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_cluster_page_reads_the_cluster_again(async_world):
    comm = WebsocketCommunicator(ClusterConsumer.as_asgi(), "/ws/cluster/")
    comm.scope["user"] = async_world["operator"]
    assert (await comm.connect())[0]
    await kill_subscriber(get_channel_layer())
    assert await comm.receive_json_from(timeout=10) == {"type": "cluster"}
    await comm.disconnect()
