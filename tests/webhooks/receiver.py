"""A webhook receiver over real HTTP, for the tests: an ``http.server`` on a free port in a thread
that checks each delivery's signature with the scheme docs/lms.md "Webhooks" documents (the verifier
below is the one docs/lms.md shows), answers with the statuses it is told to, and keeps what it got."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def verify(secret: str, headers, body: bytes, tolerance: int = 300) -> dict:
    """The verifier docs/lms.md shows: the event if the signature is right and recent, else ValueError."""
    msg_id, timestamp = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(timestamp)) > tolerance:
        raise ValueError("timestamp too old or too new")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    if not any(hmac.compare_digest(expected, s.split(",", 1)[1]) for s in headers["webhook-signature"].split()):
        raise ValueError("bad signature")
    return json.loads(body)


@dataclass
class Received:
    headers: dict
    body: bytes
    verified: bool
    status: int

    @property
    def event(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    secret: str = ""
    # Statuses to answer, in turn; when they run out, 204.
    statuses: list[int] = field(default_factory=list)
    # Seconds to wait before answering the next request (once), e.g. to be killed meanwhile.
    hold_next: float = 0.0
    got: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def verified_events(self) -> list[dict]:
        return [r.event for r in self.got if r.verified and 200 <= r.status < 300]


def start_receiver(path: str = "/hooks/npu-lab") -> tuple[Receiver, ThreadingHTTPServer]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            receiver.arrived.set()
            if receiver.hold_next:
                wait, receiver.hold_next = receiver.hold_next, 0.0
                time.sleep(wait)
            try:
                verify(receiver.secret, headers, body)
                verified = True
            except (ValueError, KeyError):
                verified = False
            status = (receiver.statuses.pop(0) if receiver.statuses else 204) if verified else 401
            receiver.got.append(Received(headers, body, verified, status))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    return receiver, server
