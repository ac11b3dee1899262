"""Course namespaces made by ``create``, against a minimal API server.

kmock 0.8 cannot serve ``/api/v1/namespaces`` (its URL parser fails on that path), so this
module uses a small in-process HTTP server that stores what is POSTed, answers 409 for a
name it already has and serves GETs of stored objects: enough of an API server for the calls
``create`` makes, still spoken to over HTTP by the unpatched client.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from labs.drivers import build_driver
from tests.drivers.helpers import make_spec
from tests.drivers.kubernetes.conftest import driver_config


class TinyAPIServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), TinyAPIHandler)
        self.objects: dict[str, dict] = {}
        self.posts: list[str] = []


class TinyAPIHandler(BaseHTTPRequestHandler):
    server: TinyAPIServer

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = f"{self.path}/{body['metadata']['name']}"
        self.server.posts.append(self.path)
        if key in self.server.objects:
            self._reply(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": f"{key} already exists"})
            return
        body["metadata"]["uid"] = str(uuid.uuid4())
        self.server.objects[key] = body
        self._reply(201, body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        obj = self.server.objects.get(self.path.split("?")[0])
        if obj is None:
            self._reply(404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"})
        else:
            self._reply(200, obj)


@pytest.fixture
def api_server() -> Iterator[TinyAPIServer]:
    server = TinyAPIServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_create_makes_the_course_namespace_and_its_network_policy_once_per_process(api_server: TinyAPIServer) -> None:
    url = f"http://127.0.0.1:{api_server.server_address[1]}"
    driver = build_driver(driver_config(url, manage_namespaces=True))

    driver.create(make_spec())
    driver.create(make_spec())

    assert api_server.posts.count("/api/v1/namespaces") == 1
    assert api_server.posts.count("/apis/networking.k8s.io/v1/namespaces/lab-npu101/networkpolicies") == 1
    assert api_server.posts.count("/api/v1/namespaces/lab-npu101/pods") == 2
    namespace = api_server.objects["/api/v1/namespaces/lab-npu101"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_an_existing_namespace_is_fine(api_server: TinyAPIServer) -> None:
    url = f"http://127.0.0.1:{api_server.server_address[1]}"
    build_driver(driver_config(url, manage_namespaces=True)).create(make_spec())

    uid = build_driver(driver_config(url, manage_namespaces=True)).create(make_spec())

    assert uid
    assert api_server.posts.count("/api/v1/namespaces") == 2
