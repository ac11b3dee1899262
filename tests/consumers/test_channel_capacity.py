"""A burst to the sockets of one web process: every message arrives (channels_redis's list layer dropped past 100)."""

import asyncio

from channels.layers import get_channel_layer
from django.conf import settings


def test_a_burst_of_500_messages_to_one_processs_sockets_all_arrive():
    layer = get_channel_layer()
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "portal.channel_layer.ResyncingPubSubChannelLayer"

    async def burst() -> int:
        # Two sockets of this process: their channels share the process's Redis key.
        sockets = [await layer.new_channel() for _ in range(2)]
        for n, channel in enumerate(sockets):
            await layer.group_add(f"burst.{n}", channel)
        for i in range(250):
            for n in range(2):
                await layer.group_send(f"burst.{n}", {"type": "sessions.update", "i": i})
        received = 0
        for channel in sockets:
            for _ in range(250):
                await asyncio.wait_for(layer.receive(channel), timeout=5)
                received += 1
        for n, channel in enumerate(sockets):
            await layer.group_discard(f"burst.{n}", channel)
        return received

    assert asyncio.run(burst()) == 500
