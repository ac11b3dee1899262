"""Live session updates for the pages: authenticate, join groups, forward events."""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from labs.selectors.courses import is_course_staff
from labs.services.events import course_group, student_group

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class SessionUpdatesConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/sessions/``: the user's own sessions; ``?course=<id>`` adds a course they teach."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.groups_joined = [student_group(user.pk)]
        query = parse_qs(self.scope.get("query_string", b"").decode())
        if "course" in query:
            try:
                course_id = int(query["course"][0])
            except ValueError:
                await self.close(code=CLOSE_FORBIDDEN)
                return
            if not await database_sync_to_async(is_course_staff)(user=user, course_id=course_id):
                await self.close(code=CLOSE_FORBIDDEN)
                return
            self.groups_joined.append(course_group(course_id))
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return None  # the page only listens

    async def session_update(self, event: dict) -> None:
        await self.send_json({"type": "session", "session": event["session"]})
