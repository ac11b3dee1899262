"""Live session updates for the pages: authenticate, join groups, forward events."""

from __future__ import annotations

import contextlib
from urllib.parse import parse_qs

import orjson
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils import translation
from django.utils.translation import trans_real

from labs.models import LabSession
from labs.models.sessions import stored_reason_text
from labs.presentation import card_lines, extend_label, selftest_text, share_text, smaller_offer_text
from labs.realtime import RESUBSCRIBED
from labs.selectors.courses import is_course_staff
from labs.selectors.operations import operator_scope
from labs.services.events import CLUSTER_GROUP, course_group, student_group

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
MAX_COURSES = 100


class Resyncs:
    """A page's socket, told that updates may have been missed: the web process's Redis
    subscription was lost and is back (``portal.channel_layer``). The page reads again what it
    shows (``{"type": "resync"}``; the cluster page's message already means that)."""

    resync_message: dict = {"type": "resync"}

    async def layer_resubscribed(self, event: dict) -> None:
        await self.send_json(self.resync_message)


class WithoutDatabase:
    """Group messages whose handlers never touch the database skip Channels' ``close_old_connections``.

    Channels calls it before every handler, to close connections that outlived their age on
    the consumer's database thread: a trip to that thread and back for each message, the most
    frequent thing a page's socket does. The handlers named in ``without_database`` only
    reshape the message and send it; the others (connect and its database checks included)
    still go through Channels' own ``dispatch``.
    """

    without_database: frozenset[str] = frozenset()

    async def dispatch(self, message):
        if message["type"] in self.without_database:
            await getattr(self, get_handler_name(message))(message)
        else:
            await super().dispatch(message)


class SessionUpdatesConsumer(Resyncs, WithoutDatabase, AsyncJsonWebsocketConsumer):
    """``/ws/sessions/``: the user's own sessions; ``?course=<id>`` adds a course they teach."""

    without_database = frozenset({"sessions.update", RESUBSCRIBED})

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.groups_joined = [student_group(user.pk)]
        query = parse_qs(self.scope.get("query_string", b"").decode())
        # ``?course=1&course=2``: courses the user teaches or assists in (the console's home
        # watches all of them); any other course closes the connection.
        for raw in query.get("course", [])[:MAX_COURSES]:
            try:
                course_id = int(raw)
            except ValueError:
                await self.close(code=CLOSE_FORBIDDEN)
                return
            if not await database_sync_to_async(is_course_staff)(user=user, course_id=course_id):
                await self.close(code=CLOSE_FORBIDDEN)
                return
            self.groups_joined.append(course_group(course_id))
        self.language = reader_language(self.scope)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return None  # the page only listens

    async def sessions_update(self, event: dict) -> None:
        """Changed sessions of one group, with words in this reader's language: the publisher's
        text as it is when it wrote them in it (``language``), else rendered again.

        ``text`` is the page's message as JSON (``labs.services.events.sessions_message``); a
        message with ``sessions`` instead (a process of an earlier release, during an upgrade) is
        encoded here, as it was then."""
        text = event.get("text")
        if event.get("language") == self.language and text is not None:
            await self.send(text_data=text)
            return
        sessions = event["sessions"] if text is None else orjson.loads(text)["sessions"]
        if event.get("language") != self.language:
            with translation.override(self.language):
                sessions = [localised(session) for session in sessions]
        await self.send_json({"type": "sessions", "sessions": sessions})


def localised(payload: dict) -> dict:
    """The words of a session payload (reason, state label, share, the card's timed lines) in the
    active language. Numbers and times stay as they are: the page fills the timed lines' clock
    slot in the reader's time zone (``labs.presentation.card_line``).
    """
    state = payload["state"]
    return {
        **payload,
        "reason": stored_reason_text(payload.get("reason_code", ""), payload.get("reason_params") or {}),
        "state_label": str(LabSession.State(state).label),
        "share_text": share_text(payload["core_percent"], payload["memory_mib"], payload.get("cards", 1)),
        "selftest_text": selftest_text(payload.get("selftest_visible_mib"), bool(payload.get("selftest_over_cap"))),
        "extend_label": extend_label(payload["extension_minutes"]) if payload.get("extensions_left") else "",
        "lines": card_lines(payload),
        "smaller_offer_text": smaller_offer_text(payload.get("smaller_offer")),
    }


def reader_language(scope: dict) -> str:
    """The language the reader chose (the language cookie), else the one their browser asks for."""
    cookie = (scope.get("cookies") or {}).get(settings.LANGUAGE_COOKIE_NAME, "")
    if cookie and translation.check_for_language(cookie):
        with contextlib.suppress(LookupError):
            return translation.get_supported_language_variant(cookie)
    headers = dict(scope.get("headers") or [])
    accept = headers.get(b"accept-language", b"").decode("latin-1")
    for code, _quality in trans_real.parse_accept_lang_header(accept):
        if code == "*":
            break
        with contextlib.suppress(LookupError):
            return translation.get_supported_language_variant(code)
    return settings.LANGUAGE_CODE


class ClusterConsumer(Resyncs, WithoutDatabase, AsyncJsonWebsocketConsumer):
    """``/ws/cluster/``: operators hear that cards, nodes or their use changed (the page reads them again)."""

    without_database = frozenset({"cluster.changed", RESUBSCRIBED})
    resync_message = {"type": "cluster"}

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if await database_sync_to_async(operator_scope)(user=user) is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.channel_layer.group_add(CLUSTER_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(CLUSTER_GROUP, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return None

    async def cluster_changed(self, event: dict) -> None:
        await self.send_json({"type": "cluster"})
