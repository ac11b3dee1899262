"""kmock's Kubernetes API emulator on a real local port, and a stand-in kubelet that talks to it.

The emulator is an aiohttp server; the portal's driver and the official client are
synchronous, so the server runs on its own event loop in a background thread and the tests
talk to it over HTTP like any API server. Nothing in the client is patched.

kmock 0.8 stores objects exactly as posted, so ``Emulator`` adds what an API server would:
``metadata.uid``, ``creationTimestamp``, ``resourceVersion`` and, for pods, ``status.phase:
Pending``. Status changes are left to ``Kubelet``, which PATCHes ``pods/<name>/status``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import kmock
from kubernetes import client


class Emulator(kmock.KubernetesEmulator):
    """``KubernetesEmulator`` that fills in the fields a real API server sets on create."""

    _versions = itertools.count(1)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # Built-in resources, so listing a kind with no objects yet answers an empty list, not 404.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # kmock 0.8 uses importlib.resources.read_binary
            self.resources.load_bundled()

    async def _handle(self, request: kmock.Request) -> Any:
        if request.resource is not None and request.action == kmock.action.CREATE and isinstance(request.data, dict):
            metadata = request.data.setdefault("metadata", {})
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            metadata["resourceVersion"] = str(next(self._versions))
            if request.resource.plural == "pods":
                request.data.setdefault("status", {"phase": "Pending"})
        return await super()._handle(request)


class EmulatorThread:
    """Runs an ``Emulator`` and its HTTP server on a background event loop; ``url`` is its address."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self.loop.run_until_complete, args=(self._serve(),), daemon=True)
        self.url = ""
        self.kmock: Emulator

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with Emulator() as emulator, kmock.Server(emulator) as server:
            self.kmock = emulator
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def start(self) -> EmulatorThread:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the kmock emulator did not start")
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def react(self, criteria: Any, reaction: Callable[..., Any]) -> None:
        """Add a reaction (``kmock[criteria] << reaction``) on the server's own loop."""
        done = threading.Event()

        def add() -> None:
            self.kmock[criteria] << reaction
            done.set()

        self.loop.call_soon_threadsafe(add)
        done.wait(5)

    def objects(self, plural: str) -> list[dict]:
        """The live objects of one resource, as the emulator stores them."""
        found = []
        for (resource, _namespace, _name), obj in list(self.kmock.objects.items()):
            if resource.plural == plural and not obj.deleted:
                found.append(obj.raw)
        return found


def api(url: str) -> client.CoreV1Api:
    configuration = client.Configuration()
    configuration.host = url
    return client.CoreV1Api(client.ApiClient(configuration))


class Kubelet:
    """Moves pods through their lifecycle by PATCHing ``pods/<name>/status``, as the kubelet and scheduler do."""

    def __init__(self, url: str) -> None:
        self.core = api(url)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def patch(self, pod: dict | client.V1Pod, status: dict) -> None:
        name, namespace = _name_and_namespace(pod)
        self.core.patch_namespaced_pod_status(name, namespace, {"status": status})

    def unschedulable(self, pod: Any, message: str) -> None:
        self.patch(
            pod,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
            },
        )

    def scheduled(self, pod: Any) -> None:
        self.patch(
            pod,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [_container({"waiting": {"reason": "ContainerCreating"}}, ready=False)],
            },
        )

    def image_pull_failed(self, pod: Any, message: str) -> None:
        self.patch(
            pod,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [_container({"waiting": {"reason": "ErrImagePull", "message": message}}, ready=False)],
            },
        )

    def running(self, pod: Any, *, ready: bool = True, restart_count: int = 0, last_end: dict | None = None) -> None:
        """Running (and Ready); after ``restart_count`` restarts, the last container having ended as ``last_end``."""
        container = _container({"running": {"startedAt": "2026-01-01T00:00:00Z"}}, ready=ready, restart_count=restart_count)
        if last_end is not None:
            container["lastState"] = {"terminated": last_end}
        self.patch(
            pod,
            {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True" if ready else "False"},
                ],
                "containerStatuses": [container],
            },
        )

    def ended(self, pod: Any, *, exit_code: int, reason: str, restart_count: int = 0, log: str = "") -> None:
        """The container ended and the pod is still Running: the kubelet has yet to restart it (or, if it exited
        cleanly under ``OnFailure``, will not). ``log``: what the container wrote, its message if the pod asks."""
        ended = {"terminated": {"exitCode": exit_code, "reason": reason}}
        if message := _fallback_message(pod, exit_code, log):
            ended["terminated"]["message"] = message
        self.patch(
            pod,
            {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
                "containerStatuses": [_container(ended, ready=False, restart_count=restart_count)],
            },
        )

    def backing_off(self, pod: Any, *, exit_code: int, reason: str, restart_count: int) -> None:
        """CrashLoopBackOff: the container ended again (``lastState``) and waits for its next restart."""
        container = _container({"waiting": {"reason": "CrashLoopBackOff"}}, ready=False, restart_count=restart_count)
        container["lastState"] = {"terminated": {"exitCode": exit_code, "reason": reason}}
        self.patch(
            pod,
            {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
                "containerStatuses": [container],
            },
        )

    def failed(self, pod: Any, *, exit_code: int, reason: str, log: str = "") -> None:
        ended = {"terminated": {"exitCode": exit_code, "reason": reason}}
        if message := _fallback_message(pod, exit_code, log):
            ended["terminated"]["message"] = message
        self.patch(pod, {"phase": "Failed", "containerStatuses": [_container(ended, ready=False)]})

    def start_in_background(self, *, after_seconds: float = 1.0) -> Kubelet:
        """Start every pending pod ``after_seconds`` after it was first seen (for the contract suite)."""
        seen: dict[str, float] = {}

        def loop() -> None:
            while not self._stop.wait(0.1):
                try:
                    pods = self.core.list_pod_for_all_namespaces().items
                except Exception:  # noqa: BLE001 - the emulator is stopping
                    return
                now = time.monotonic()
                for pod in pods:
                    if (pod.status.phase if pod.status else "Pending") != "Pending":
                        continue
                    first = seen.setdefault(pod.metadata.uid, now)
                    if now - first >= after_seconds:
                        try:
                            self.running(pod)
                        except client.ApiException:
                            pass  # deleted meanwhile

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def _fallback_message(pod: Any, exit_code: int, log: str) -> str:
    """The terminated state's message as the kubelet writes it with no termination-message file: the
    log's last 80 lines, at most 2048 bytes, under ``terminationMessagePolicy: FallbackToLogsOnError``
    and a failed exit; nothing under the default policy (``File``)."""
    spec = pod["spec"] if isinstance(pod, dict) else client.ApiClient().sanitize_for_serialization(pod)["spec"]
    (container,) = spec["containers"]
    if container.get("terminationMessagePolicy") != "FallbackToLogsOnError" or exit_code == 0:
        return ""
    tail = "\n".join(log.splitlines()[-80:]).encode()[-2048:]
    return tail.decode(errors="replace")


def _container(state: dict, *, ready: bool, restart_count: int = 0) -> dict:
    return {
        "name": "lab",
        "image": "npu-lab/jupyter:1",
        "imageID": "",
        "ready": ready,
        "restartCount": restart_count,
        "state": state,
    }


def _name_and_namespace(pod: dict | client.V1Pod) -> tuple[str, str]:
    if isinstance(pod, dict):
        return pod["metadata"]["name"], pod["metadata"]["namespace"]
    return pod.metadata.name, pod.metadata.namespace
