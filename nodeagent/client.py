"""What the portal uses to call a node agent (standard library only).

``AgentClient(base_url, token, timeout=5)``:

- ``health() -> HealthReport`` (no token needed by the agent, but sent anyway);
- ``inventory() -> list[CardReport]``; ``inventory_report() -> InventoryReport`` (the cards,
  the host and the node's versions); ``instances() -> list[InstanceReport]``;
- ``unregister(entity_id) -> bool``: ``True`` when removed (204), ``False`` when the node has no
  such instance (404) — so calling it again is harmless;
- ``register(entity_id, card_index, core_percent, memory_mib, scenario="development",
  policy="elastic") -> InstanceReport`` and ``set_demand(entity_id, demand_percent,
  memory_used_mib=None) -> InstanceReport``: simulated agents only.

The records are the wire format's (``nodeagent.wire``), the one definition the agent sends.

Errors, all ``AgentError``: ``AgentUnavailable`` when the agent cannot answer properly — network
error, timeout (these two are ``AgentUnreachable``), a 5xx (502: the agent could not read its
node), a redirect, malformed JSON;
``AgentAuthError`` on 401/403 (a wrong token: configuration, not a passing failure);
``AgentRequestError`` (also a ``ValueError``) when the agent refused the request (400, 404, 405,
409), with ``status`` and the agent's message.

The client neither follows redirects nor uses proxies from the environment, so the bearer
token only ever goes to ``base_url``.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from nodeagent.wire import (
    CardReport,
    HealthReport,
    HostReport,
    InstanceReport,
    InventoryReport,
    MalformedReport,
    health_from_json,
    instance_from_json,
    instances_from_json,
    inventory_from_json,
)

T = TypeVar("T")

class AgentError(Exception):
    """Any failure talking to an agent."""


class AgentUnavailable(AgentError):
    """The agent did not answer properly (down, slow, 5xx, malformed answer)."""


class AgentUnreachable(AgentUnavailable):
    """No answer at all: the connection failed, was refused or timed out (a host down or hung)."""


class AgentAuthError(AgentError):
    """The agent refused the token."""


class AgentRequestError(AgentError, ValueError):
    """The agent refused the request; ``status`` is the HTTP status, ``str(exc)`` its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class AgentClient:
    """A node agent at ``base_url`` (``http://host:9410``), called with ``token``; see the module docstring."""

    def __init__(self, base_url: str, token: str, timeout: float = 5) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"an agent URL looks like http://host:9410, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

    def __repr__(self) -> str:
        return f"AgentClient({self.base_url!r})"

    def health(self) -> HealthReport:
        return _read(health_from_json, self._call("GET", "/healthz")[1])

    def inventory(self) -> list[CardReport]:
        return self.inventory_and_host()[0]

    def inventory_and_host(self) -> tuple[list[CardReport], HostReport | None]:
        """The cards and the host's CPU and memory; ``None`` for the host from an agent that
        predates host figures (its node is then not limited in host resources)."""
        report = self.inventory_report()
        return report.cards, report.host

    def inventory_report(self) -> InventoryReport:
        """The cards, the host and the node's versions (see ``nodeagent.wire`` for older agents)."""
        return _read(inventory_from_json, self._call("GET", "/v1/inventory")[1])

    def instances(self) -> list[InstanceReport]:
        return _read(instances_from_json, self._call("GET", "/v1/instances")[1])

    def unregister(self, entity_id: str) -> bool:
        status, _ = self._call("DELETE", f"/v1/instances/{quote(entity_id, safe='')}", allow=(404,))
        return status == 204

    def register(
        self,
        entity_id: str,
        card_index: int,
        core_percent: int,
        memory_mib: int,
        scenario: str = "development",
        policy: str = "elastic",
    ) -> InstanceReport:
        body = {
            "entity_id": entity_id,
            "card_index": card_index,
            "core_percent": core_percent,
            "memory_mib": memory_mib,
            "scenario": scenario,
            "policy": policy,
        }
        return _read(instance_from_json, self._call("POST", "/v1/instances", body)[1])

    def set_demand(self, entity_id: str, demand_percent: int, memory_used_mib: int | None = None) -> InstanceReport:
        body: dict[str, int] = {"demand_percent": demand_percent}
        if memory_used_mib is not None:
            body["memory_used_mib"] = memory_used_mib
        return _read(instance_from_json, self._call("POST", f"/v1/instances/{quote(entity_id, safe='')}/demand", body)[1])

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, allow: tuple[int, ...] = ()) -> tuple[int, Any]:
        """(status, decoded JSON or None) for a 2xx or an ``allow``-ed status; raises otherwise."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        where = f"{method} {self.base_url}{path}"
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, _read_quietly(exc)
        except (OSError, http.client.HTTPException) as exc:  # URLError and timeouts are OSErrors
            reason = getattr(exc, "reason", exc)
            raise AgentUnreachable(f"{where}: {reason}") from None
        if status in (401, 403):
            raise AgentAuthError(f"{where}: the agent refused the token ({status})")
        if status >= 500 or 300 <= status < 400:
            raise AgentUnavailable(f"{where}: {status} {_message(raw)}")
        if status >= 400 and status not in allow:
            raise AgentRequestError(status, _message(raw))
        if status == 204 or status in allow:
            return status, None
        try:
            return status, json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise AgentUnavailable(f"{where}: the answer is not JSON") from None


def _read_quietly(response: urllib.error.HTTPError) -> bytes:
    try:
        return response.read()
    except (OSError, http.client.HTTPException):
        return b""
    finally:
        response.close()


def _message(raw: bytes) -> str:
    """The agent's ``{"error": ...}`` message, or the start of whatever came back."""
    try:
        message = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        message = None
    return message if isinstance(message, str) else raw[:200].decode("utf-8", "replace")


def _read(read: Callable[[Any], T], payload: Any) -> T:
    """``read(payload)``; an answer that does not fit the wire format is ``AgentUnavailable``."""
    try:
        return read(payload)
    except MalformedReport as exc:
        raise AgentUnavailable(f"malformed answer from the agent: {exc}") from None
