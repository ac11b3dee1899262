"""channels_redis's Pub/Sub layer, telling this process's sockets when updates may have been missed.

Redis Pub/Sub keeps nothing: whatever is published while a web process's subscribing connection
is down (Redis restarted, a network blip, ``CLIENT KILL``) never reaches that process. redis-py
connects again on the next read and subscribes to every channel it had (``PubSub.on_connect``, which
it calls on every connect after the first); channels_redis goes on as if nothing happened. Here
that moment also puts one :data:`RESUBSCRIBED` message in every channel of the process, so each
socket's consumer can tell its page to read again what it shows (``labs.consumers``).

Its publishes (``group_send``) asked for in one turn of the event loop go to Redis together, in
one pipeline: a controller round's page updates, one ``group_send`` to each student's group and
each course's, started together (``labs.services.events``), cost one round trip, not one each.
"""

from __future__ import annotations

import asyncio
import logging

from channels_redis.pubsub import RedisPubSubChannelLayer, RedisSingleShardConnection
from redis.asyncio.client import PubSub

from labs.realtime import RESUBSCRIBED

logger = logging.getLogger(__name__)



class ResubscribedPubSub(PubSub):
    """redis-py's PubSub that calls ``resubscribed`` once it has subscribed again on a new connection."""

    def __init__(self, *args, resubscribed, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._resubscribed = resubscribed

    async def on_connect(self, connection) -> None:
        await super().on_connect(connection)
        self._resubscribed()


class _Shard(RedisSingleShardConnection):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._outbox: list[tuple[str, bytes, asyncio.Future]] = []
        self._sending: asyncio.Task | None = None

    async def publish(self, channel: str, message: bytes) -> None:
        """PUBLISH, sent with the others asked for in this turn of the event loop (and while those
        before are being sent); returns once Redis has answered (or raises what sending raised)."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._outbox.append((channel, message, done))
        if self._sending is None or self._sending.done():  # the others of this turn join it before it runs
            self._sending = loop.create_task(self._publish_outbox())
        await done

    async def _publish_outbox(self) -> None:
        while self._outbox:
            async with self._lock:
                batch, self._outbox = self._outbox, []
                await self._publish_batch(batch)

    async def _publish_batch(self, batch: list[tuple[str, bytes, asyncio.Future]]) -> None:
        outcome: BaseException | None = None
        try:
            self._ensure_redis()
            if len(batch) == 1:
                await self._redis.publish(batch[0][0], batch[0][1])
            else:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for channel, message, _ in batch:
                        pipe.publish(channel, message)
                    await pipe.execute()
        except BaseException as exc:  # cancelled too: no sender may wait for ever
            outcome = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for _, _, done in batch:
                if done.done():  # its sender was cancelled
                    continue
                if outcome is None:
                    done.set_result(None)
                else:
                    done.set_exception(outcome)

    def _ensure_redis(self) -> None:
        super()._ensure_redis()
        if not isinstance(self._pubsub, ResubscribedPubSub):  # made just now, not connected yet
            self._pubsub = ResubscribedPubSub(self._redis.connection_pool, resubscribed=self._resubscribed)

    def _resubscribed(self) -> None:
        layer = self.channel_layer  # this event loop's layer; its ``channel_layer`` is the proxy
        channels = list(layer.channels.values())
        logger.warning(
            "subscribed to Redis again after a lost connection: telling %d socket(s) of this process to read again",
            len(channels),
        )
        message = layer.channel_layer.serialize({"type": RESUBSCRIBED})
        for queue in channels:
            queue.put_nowait(message)


class ResyncingPubSubChannelLayer(RedisPubSubChannelLayer):
    """``RedisPubSubChannelLayer`` whose connections send :data:`RESUBSCRIBED` to every channel of the
    process after they connected again (``CHANNELS_LAYER=pubsub``, the default)."""

    def _get_layer(self):
        made = asyncio.get_running_loop() not in self._layers
        layer = super()._get_layer()
        if made:  # nothing connected yet: the shards connect on first use
            layer._shards = [_Shard(shard.host, layer) for shard in layer._shards]
        return layer
