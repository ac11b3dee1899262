"""The agent's HTTP JSON API, on the standard library's threading HTTP server.

Every endpoint but ``GET /healthz`` needs ``Authorization: Bearer <token>`` (401 otherwise); the
records are ``nodeagent.wire``'s::

    GET    /healthz                       HealthReport {"ok": true, "node", "driver"}
    GET    /v1/inventory                  InventoryReport {"node", "cards": [CardReport, ...], "host": HostReport,
                                           "versions": VersionsReport, "boot_id", "device_share"}
    GET    /v1/instances                  {"instances": [InstanceReport, ...]}
    DELETE /v1/instances/<entity_id>      204; 404 when the node has no such instance
    POST   /v1/instances                  simulated driver: {entity_id, card_index, core_percent, memory_mib,
                                           scenario?, policy?} -> 201 + the InstanceReport; 400 invalid, 409 duplicate
    POST   /v1/instances/<id>/demand      simulated driver: {demand_percent, memory_used_mib?} -> 200 + the InstanceReport
    GET    /metrics                       Prometheus text (``DriverCollector``)

Errors are JSON ``{"error": "..."}``: 400 bad JSON or values, 404 unknown path or instance,
405 method not allowed (or registering on a real node), 409 duplicate, 413 body over 64 KiB,
502 when the node cannot be read or changed (a failing vendor command), 500 otherwise — the
details of a 500 go to the log, never to the client. Requests are logged without headers, so
the token never reaches the log.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from nodeagent.cards.base import DriverError, DuplicateInstance, NodeDriver, NotSupported, UnknownInstance
from nodeagent.wire import HealthReport, InventoryReport, to_json

logger = logging.getLogger("nodeagent")

MAX_BODY_BYTES = 64 * 1024
# A body over the cap is read and dropped up to this size so the client gets its 413 instead
# of a reset connection; anything larger is cut off.
DRAIN_LIMIT_BYTES = 1024 * 1024

REGISTER_FIELDS = {"entity_id": str, "card_index": int, "core_percent": int, "memory_mib": int, "scenario": str, "policy": str}
REGISTER_REQUIRED = ("entity_id", "card_index", "core_percent", "memory_mib")
DEMAND_FIELDS = {"demand_percent": int, "memory_used_mib": int}


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class AgentServer(ThreadingHTTPServer):
    """The HTTP server; one thread per request. ``url`` is where it listens."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], driver: NodeDriver, token: str, node: str) -> None:
        if not token:
            raise ValueError("the agent needs a token: set AGENT_TOKEN or AGENT_TOKEN_FILE, or pass --token")
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.driver = driver
        self.token = token.encode()
        self.node = node
        super().__init__(address, AgentRequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in str(host) else f"http://{host}:{port}"


def make_server(driver: NodeDriver, token: str, host: str = "127.0.0.1", port: int = 0, node: str | None = None) -> AgentServer:
    """Build (bind, not start) the agent's server; port 0 takes a free port. Run ``serve_forever()`` in a thread."""
    node = node or getattr(driver, "node_name", None) or socket.gethostname()
    return AgentServer((host, port), driver, token, node)


class AgentRequestHandler(BaseHTTPRequestHandler):
    server: AgentServer
    server_version = "npu-lab-agent"
    # A client that stops sending does not hold a thread for ever.
    timeout = 30

    ROUTES = [
        ("GET", re.compile(r"/healthz"), "healthz"),
        ("GET", re.compile(r"/v1/inventory"), "inventory"),
        ("GET", re.compile(r"/v1/instances"), "instances"),
        ("POST", re.compile(r"/v1/instances"), "register"),
        ("DELETE", re.compile(r"/v1/instances/(?P<entity_id>[^/]+)"), "unregister"),
        ("POST", re.compile(r"/v1/instances/(?P<entity_id>[^/]+)/demand"), "demand"),
        ("GET", re.compile(r"/metrics"), "metrics"),
    ]

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        try:
            body = self._read_body()
            path = urlsplit(self.path).path
            if (self.command, path) != ("GET", "/healthz"):
                self._authenticate()
            handler, params = self._route(path)
            status, payload = getattr(self, f"handle_{handler}")(body=body, **params)
        except HttpError as exc:
            self._send(exc.status, {"error": exc.message}, exc.headers)
            return
        except DriverError as exc:
            logger.warning("driver error: %s", exc)
            self._send(502, {"error": str(exc)})
            return
        except Exception:
            logger.exception("unexpected error in %s %s", self.command, urlsplit(self.path).path)
            self._send(500, {"error": "internal error in the agent; see its log"})
            return
        if isinstance(payload, bytes):
            self._send_bytes(status, payload, CONTENT_TYPE_LATEST)
        else:
            self._send(status, payload)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "send the body with a Content-Length, not chunked")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise HttpError(400, "Content-Length is not a number") from None
        if length < 0:
            raise HttpError(400, "Content-Length is negative")
        if length > MAX_BODY_BYTES:
            remaining = min(length, DRAIN_LIMIT_BYTES)
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 65536))
                if not chunk:
                    break
                remaining -= len(chunk)
            raise HttpError(413, f"request body is over {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length) if length else b""

    def _authenticate(self) -> None:
        scheme, _, credentials = (self.headers.get("Authorization") or "").partition(" ")
        given = credentials.strip().encode("utf-8", "replace")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self.server.token):
            raise HttpError(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})

    def _route(self, path: str) -> tuple[str, dict[str, str]]:
        allowed = []
        for method, pattern, handler in self.ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if method == self.command:
                return handler, {k: unquote(v) for k, v in match.groupdict().items()}
            allowed.append(method)
        if allowed:
            raise HttpError(405, f"{self.command} is not allowed on {path}", {"Allow": ", ".join(allowed)})
        raise HttpError(404, f"no such endpoint: {path}")

    # --- endpoints ------------------------------------------------------------------------

    def handle_healthz(self, body: bytes) -> tuple[int, dict[str, Any]]:
        return 200, to_json(HealthReport(ok=True, node=self.server.node, driver=self.server.driver.name))

    def handle_inventory(self, body: bytes) -> tuple[int, dict[str, Any]]:
        driver = self.server.driver
        # The cards first: the flexnpu-smi driver's versions reuse the npu-smi output they read.
        cards = driver.inventory()
        versions = driver.versions()
        report = InventoryReport(
            node=self.server.node,
            cards=cards,
            host=driver.host(),
            versions=versions,
            boot_id=driver.boot_id(),
            device_share=driver.device_share(),
        )
        return 200, to_json(report)

    def handle_instances(self, body: bytes) -> tuple[int, dict[str, Any]]:
        return 200, {"instances": [to_json(instance) for instance in self.server.driver.instances()]}

    def handle_unregister(self, body: bytes, entity_id: str) -> tuple[int, None]:
        if not self.server.driver.unregister(entity_id):
            raise HttpError(404, f"no instance {entity_id} on this node")
        return 204, None

    def handle_register(self, body: bytes) -> tuple[int, dict[str, Any]]:
        driver = self.server.driver
        if not driver.registers_instances:
            raise HttpError(405, f"the {driver.name} driver does not register instances: on a real node the device plugin does")
        fields = _json_object(body, REGISTER_FIELDS, REGISTER_REQUIRED)
        try:
            instance = driver.register(**fields)
        except DuplicateInstance as exc:
            raise HttpError(409, str(exc)) from None
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        return 201, to_json(instance)

    def handle_demand(self, body: bytes, entity_id: str) -> tuple[int, dict[str, Any]]:
        driver = self.server.driver
        if not driver.registers_instances:
            raise HttpError(405, f"the {driver.name} driver cannot set a demand: the instance's workload makes it")
        fields = _json_object(body, DEMAND_FIELDS, ("demand_percent",))
        try:
            instance = driver.set_demand(entity_id, **fields)
        except NotSupported as exc:
            raise HttpError(405, str(exc)) from None
        except UnknownInstance:
            raise HttpError(404, f"no instance {entity_id} on this node") from None
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        return 200, to_json(instance)

    def handle_metrics(self, body: bytes) -> tuple[int, bytes]:
        registry = CollectorRegistry()
        registry.register(DriverCollector(self.server.driver, self.server.node))
        return 200, generate_latest(registry)

    # --- responses --------------------------------------------------------------------------

    def _send(self, status: int, payload: dict[str, Any] | None, headers: dict[str, str] | None = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self._send_bytes(status, body, "application/json", headers)

    def _send_bytes(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if status != 204:
            self.wfile.write(body)

    def version_string(self) -> str:
        return self.server_version

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        logger.info("%s %s %s %s", self.client_address[0], self.command, urlsplit(self.path).path, code)

    def log_message(self, format: str, *args: Any) -> None:
        logger.warning("%s %s", self.client_address[0], format % args)


def _json_object(body: bytes, fields: dict[str, type], required: tuple[str, ...]) -> dict[str, Any]:
    """The request body as a JSON object holding only ``fields`` of their types (bool is not an int)."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HttpError(400, f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HttpError(400, "request body must be a JSON object")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise HttpError(400, f"unknown field(s): {', '.join(unknown)}")
    missing = [name for name in required if name not in data]
    if missing:
        raise HttpError(400, f"missing field(s): {', '.join(missing)}")
    for name, value in data.items():
        kind = fields[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise HttpError(400, f"{name} must be {'an integer' if kind is int else 'a string'}, got {json.dumps(value)}")
    return data


MIB = 1024 * 1024


class DriverCollector:
    """Prometheus gauges read from the driver at scrape time, named like openFuyao's xpu-exporter and HAMi's.

    Per card (labels ``node``, ``card``, ``die_id``): ``npu_card_memory_total_bytes``,
    ``npu_card_memory_used_bytes``, ``npu_card_memory_allocated_bytes`` (sum of the instances'
    memory caps), ``npu_card_aicore_utilization_ratio`` (0..1), ``npu_card_core_allocated_ratio``
    (sum of floors / 100), ``npu_card_instances``, ``npu_card_healthy`` (1 or 0).
    Per instance (labels ``node``, ``card``, ``die_id``, ``entity_id``):
    ``npu_instance_memory_used_bytes``, ``npu_instance_memory_limit_bytes``,
    ``npu_instance_core_floor_ratio`` (floor / 100), ``npu_instance_aicore_utilization_ratio``.
    Card health as ``npu-smi`` reads it: ``npu_card_temperature_celsius`` and
    ``npu_card_power_watts``, with no sample for a card that reports none (``NA``), never a 0;
    ``npu_node_info`` (1, labels ``node``, ``driver_version``, ``firmware_version``,
    ``npu_smi_version``) names what the node runs.
    A driver error propagates (the scrape fails with 502) rather than exporting a partial view.
    The card's AI Core use is what ``npu-smi`` prints, which the driver forces to 0 in vNPU mode:
    shares are read from the instances, never from it.
    """

    CARD_LABELS = ["node", "card", "die_id"]
    INSTANCE_LABELS = ["node", "card", "die_id", "entity_id"]

    def __init__(self, driver: NodeDriver, node: str) -> None:
        self.driver = driver
        self.node = node

    def collect(self):
        cards = self.driver.inventory()
        instances = self.driver.instances()
        die_ids = {card.index: card.die_id for card in cards}

        def card_gauge(name: str, documentation: str, value) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, documentation, labels=self.CARD_LABELS)
            for card in cards:
                family.add_metric([self.node, str(card.index), card.die_id], value(card))
            return family

        def instance_gauge(name: str, documentation: str, value) -> GaugeMetricFamily:
            family = GaugeMetricFamily(name, documentation, labels=self.INSTANCE_LABELS)
            for i in instances:
                family.add_metric([self.node, str(i.card_index), die_ids.get(i.card_index, ""), i.entity_id], value(i))
            return family

        def on_card(card) -> list:
            return [i for i in instances if i.card_index == card.index]

        yield card_gauge("npu_card_memory_total_bytes", "Card memory (HBM).", lambda c: c.memory_total_mib * MIB)
        yield card_gauge("npu_card_memory_used_bytes", "Card memory in use.", lambda c: c.memory_used_mib * MIB)
        yield card_gauge(
            "npu_card_memory_allocated_bytes",
            "Sum of the memory caps of the instances on the card.",
            lambda c: sum(i.memory_mib for i in on_card(c)) * MIB,
        )
        yield card_gauge("npu_card_aicore_utilization_ratio", "AI Core in use, 0..1.", lambda c: c.aicore_percent / 100)
        yield card_gauge(
            "npu_card_core_allocated_ratio",
            "Sum of the AI Core floors of the instances on the card, over 100.",
            lambda c: sum(i.core_percent for i in on_card(c)) / 100,
        )
        yield card_gauge("npu_card_instances", "FlexNPU instances on the card.", lambda c: len(on_card(c)))
        yield card_gauge("npu_card_healthy", "1 when the card reports healthy.", lambda c: 1 if c.healthy else 0)
        temperature = GaugeMetricFamily(
            "npu_card_temperature_celsius", "Card temperature (npu-smi Temp(C)).", labels=self.CARD_LABELS
        )
        power = GaugeMetricFamily("npu_card_power_watts", "Card power draw (npu-smi Power(W)).", labels=self.CARD_LABELS)
        for card in cards:
            labels = [self.node, str(card.index), card.die_id]
            if card.temperature_celsius is not None:
                temperature.add_metric(labels, card.temperature_celsius)
            if card.power_milliwatts is not None:
                power.add_metric(labels, card.power_milliwatts / 1000)
        yield temperature
        yield power
        versions = self.driver.versions()
        info = GaugeMetricFamily(
            "npu_node_info",
            "What the node runs: NPU driver, card firmware and npu-smi versions (empty: not known).",
            labels=["node", "driver_version", "firmware_version", "npu_smi_version"],
        )
        info.add_metric([self.node, versions.driver, versions.firmware, versions.npu_smi], 1)
        yield info
        yield instance_gauge("npu_instance_memory_used_bytes", "Memory the instance uses.", lambda i: i.memory_used_mib * MIB)
        yield instance_gauge("npu_instance_memory_limit_bytes", "The instance's memory cap.", lambda i: i.memory_mib * MIB)
        yield instance_gauge("npu_instance_core_floor_ratio", "AI Core floor, over 100.", lambda i: i.core_percent / 100)
        yield instance_gauge(
            "npu_instance_aicore_utilization_ratio", "AI Core the instance uses, 0..1.", lambda i: i.aicore_percent / 100
        )
