"""The course model endpoint's gateway: an OpenAI-compatible ASGI application in front of a
course's vLLM server, served by the portal's own process (``portal.asgi`` routes ``/gateway/``
here before Django).

``/gateway/<endpoint id>/v1/chat/completions``, ``/v1/completions`` (POST) and ``/v1/models``
(GET). Per request, in this order, each refusal an OpenAI-style error JSON:

1. a key in ``Authorization: Bearer npk_...`` (401 without one, before anything is read);
2. the key is a live key of this endpoint's course (``labs.selectors.gateway.key_grant``: 401 a
   wrong or revoked key, 403 another course's key, an ended course, a disabled endpoint);
3. the student's requests per minute (a fixed window in Redis, the limits library; 429);
4. the student's weekly token budget (429 ``insufficient_quota`` once this week's tokens reach it);
5. a body of at most ``MAX_REQUEST_BYTES`` (413) that is a JSON object (400);
6. with no upstream URL of its own, the course's model lab is running (else it is queued, once, by
   ``labs.services.gateway.endpoint_session_wake``, and the answer is 503 ``model_starting``).

The request goes upstream with ``stream_options.include_usage`` set when it streams, so the last
event says the tokens; the response goes back chunk by chunk as the upstream sends it (nothing is
held back), its ``usage`` read on the way and added to the student's week in the ledger
(``labs.services.gateway.token_usage_record``). The key is never logged and never sent upstream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import weakref
from concurrent.futures import ThreadPoolExecutor

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection
from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage
from limits.aio.strategies import FixedWindowRateLimiter

from labs.selectors.gateway import GATEWAY_PREFIX, Grant, Refusal, key_grant
from labs.services.gateway import endpoint_session_wake, token_usage_record

log = logging.getLogger(__name__)

PREFIX = GATEWAY_PREFIX
MAX_REQUEST_BYTES = 1024 * 1024  # a chat's prompt is text: a megabyte is a long book
STARTING_RETRY_SECONDS = 30  # a vLLM takes a minute or more to load its model
ROUTES = {"chat/completions": "POST", "completions": "POST", "models": "GET"}
_PATH = re.compile(r"/gateway/([1-9][0-9]{0,9})/v1/(chat/completions|completions|models)/?")
# The database reads and writes go to a few threads of their own, never the event loop's.
_DB_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gateway-db")


async def application(scope, receive, send) -> None:
    """The ASGI application for ``/gateway/`` paths (HTTP only)."""
    match = _PATH.fullmatch(scope["path"])
    if match is None:
        return await _error(
            send, 404, "not_found", "No such endpoint path: use /gateway/<id>/v1/chat/completions, /v1/completions or /v1/models."
        )
    endpoint_id, route = int(match.group(1)), match.group(2)
    if scope["method"] != ROUTES[route]:
        return await _error(send, 405, "method_not_allowed", f"Use {ROUTES[route]} for /v1/{route}.")
    key = _bearer(scope)
    if not key:
        return await _error(send, 401, "missing_api_key", "No API key: send Authorization: Bearer <your course key>.")
    grant = await _in_db_thread(key_grant, endpoint_id=endpoint_id, key=key)
    del key
    if isinstance(grant, Refusal):
        return await _error(send, grant.status, grant.code, grant.message)
    try:
        allowed = await _limiter().hit(
            RateLimitItemPerMinute(grant.requests_per_minute), str(grant.endpoint_id), str(grant.student_id)
        )
    except Exception as exc:  # Redis down: refuse rather than serve without a limit
        log.warning("gateway: endpoint %s rate limiter unavailable: %s", grant.endpoint_id, type(exc).__name__)
        return await _error(send, 503, "rate_limiter_unavailable", "The portal cannot count requests now; try again soon.")
    if not allowed:
        return await _error(
            send, 429, "rate_limit_exceeded", f"Rate limit reached: {grant.requests_per_minute} requests per minute."
        )
    if grant.weekly_tokens is not None and grant.tokens_this_week >= grant.weekly_tokens:
        return await _error(
            send,
            429,
            "insufficient_quota",
            f"This week's token budget is used up ({grant.tokens_this_week} of {grant.weekly_tokens} tokens); "
            "it starts again on Monday.",
        )
    body = b""
    if scope["method"] == "POST":
        body = await _read_body(scope, receive)
        if body is None:
            return await _error(send, 413, "request_too_large", f"The request is larger than {MAX_REQUEST_BYTES} bytes.")
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            return await _error(send, 400, "invalid_request_error", "The request body must be a JSON object.")
        if payload.get("stream"):
            options = payload.get("stream_options") if isinstance(payload.get("stream_options"), dict) else {}
            payload["stream_options"] = {**options, "include_usage": True}
            body = json.dumps(payload).encode()
    if not grant.upstream_url:  # the portal runs the model: wake it, the client retries
        await _in_db_thread(endpoint_session_wake, endpoint_id=grant.endpoint_id)
        return await _error(
            send,
            503,
            "model_starting",
            "The course's model is starting; try again in a minute.",
            headers=[(b"retry-after", str(STARTING_RETRY_SECONDS).encode())],
        )
    await _forward(send, grant, scope["method"], route, body)


async def _forward(send, grant: Grant, method: str, route: str, body: bytes) -> None:
    counter = UsageReader()
    request = _client().build_request(
        method,
        f"{grant.upstream_url}/{route}",
        content=body or None,
        headers={
            **({"content-type": "application/json"} if body else {}),
            # The portal's own lab takes its session's key; the student's key never goes upstream.
            **({"authorization": f"Bearer {grant.upstream_token}"} if grant.upstream_token else {}),
        },
    )
    try:
        upstream = await _client().send(request, stream=True)
    except httpx.HTTPError as exc:
        log.warning("gateway: endpoint %s upstream unreachable: %s", grant.endpoint_id, type(exc).__name__)
        return await _error(send, 502, "upstream_unavailable", "The course's model server does not answer; try again soon.")
    try:
        headers = [(b"content-type", upstream.headers.get("content-type", "application/json").encode())]
        if "text/event-stream" in upstream.headers.get("content-type", ""):
            headers.append((b"cache-control", b"no-cache"))
            headers.append((b"x-accel-buffering", b"no"))  # no proxy in front should hold it back either
        await send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
        async for chunk in upstream.aiter_raw():
            counter.feed(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await upstream.aclose()
        if method == "POST" and upstream.status_code < 400:
            prompt, completion = counter.tokens()
            await _in_db_thread(
                token_usage_record,
                course_id=grant.course_id,
                student_id=grant.student_id,
                institution_id=grant.institution_id,
                prompt_tokens=prompt,
                completion_tokens=completion,
            )


class UsageReader:
    """The ``usage`` of a response read as it passes: the last ``usage`` object of a Server-Sent
    Events stream (``data: {...}`` lines; the usage event comes last) or of a JSON body. Only the
    part of a line not yet ended is kept between chunks, and a JSON body up to ``MAX_REQUEST_BYTES``."""

    def __init__(self) -> None:
        self._pending = b""
        self._usage: dict | None = None
        self._body = bytearray()
        self._events = False

    def feed(self, chunk: bytes) -> None:
        if not self._events and not self._body and chunk.lstrip().startswith((b"data:", b":", b"event:")):
            self._events = True
        if not self._events:
            if len(self._body) + len(chunk) <= MAX_REQUEST_BYTES * 8:
                self._body.extend(chunk)
            return
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:") or b'"usage"' not in line:
            return
        try:
            event = json.loads(line[5:])
        except ValueError:
            return
        if isinstance(event, dict) and isinstance(event.get("usage"), dict):
            self._usage = event["usage"]

    def tokens(self) -> tuple[int, int]:
        """(prompt tokens, completion tokens); (0, 0) when the response said none."""
        if self._events:
            self._line(self._pending.strip())
        elif self._body:
            try:
                document = json.loads(bytes(self._body))
            except ValueError:
                document = None
            if isinstance(document, dict) and isinstance(document.get("usage"), dict):
                self._usage = document["usage"]
        usage = self._usage or {}
        return _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _bearer(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


async def _read_body(scope, receive) -> bytes | None:
    """The request's body, or ``None`` when it is (or says it is) larger than ``MAX_REQUEST_BYTES``."""
    for name, value in scope.get("headers", []):
        if name == b"content-length" and value.isdigit() and int(value) > MAX_REQUEST_BYTES:
            return None
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return bytes(body)
        body.extend(message.get("body", b""))
        if len(body) > MAX_REQUEST_BYTES:
            return None
        if not message.get("more_body", False):
            return bytes(body)


async def _error(send, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    """An error as the OpenAI API writes one."""
    kind = "invalid_request_error" if status < 429 else ("rate_limit_error" if status == 429 else "api_error")
    if code == "insufficient_quota":
        kind = "insufficient_quota"
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _in_db_thread(function, **kwargs):
    def run():
        close_old_connections()
        try:
            return function(**kwargs)
        finally:
            connection.close()  # back to the pool: these threads hold none between requests

    return await sync_to_async(run, thread_sensitive=False, executor=_DB_THREADS)()


_per_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _loop_objects() -> tuple[httpx.AsyncClient, FixedWindowRateLimiter]:
    """The upstreams' connection pool and the rate limiter's Redis connections, one of each per
    event loop (their connections belong to the loop that made them): a server has one loop.

    No read timeout upstream: a model may think long between tokens; a connection must be made in 10 s."""
    loop = asyncio.get_running_loop()
    if loop not in _per_loop:
        client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), limits=httpx.Limits(max_connections=1000))
        scheme, rest = settings.REDIS_URL.split("://", 1)
        scheme = {"redis": "async+redis", "rediss": "async+rediss", "unix": "async+redis+unix"}.get(scheme, "async+" + scheme)
        storage = RedisStorage(
            f"{scheme}://{rest}", implementation="redispy", key_prefix=f"{settings.API_THROTTLE_PREFIX}gateway"
        )
        _per_loop[loop] = (client, FixedWindowRateLimiter(storage))
    return _per_loop[loop]


def _client() -> httpx.AsyncClient:
    return _loop_objects()[0]


def _limiter() -> FixedWindowRateLimiter:
    return _loop_objects()[1]
