"""The node simulator's state, shared by its parts (the fake nodes, the pods it keeps, its pool and
timers), and the kubelet's words: API times, pod conditions, container statuses."""

from __future__ import annotations

import datetime as dt
import hashlib
import heapq
import ipaddress
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from labs.devcluster.nodes import FakeNode
from labs.drivers.kubernetes.profiles import get_profile

log = logging.getLogger(__name__)

FAILURE_ANNOTATION = "devcluster.npu-lab.portal/failure"
IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACKOFF = "ImagePullBackOff"
OOM_KILLED = "OOMKilled"
RESTART_ONCE = "RestartOnce"
OOM_KILLED_ONCE = "OOMKilledOnce"
# A container that ends once and is started again: its end's reason and exit code.
RESTARTS = {RESTART_ONCE: ("Error", 1), OOM_KILLED_ONCE: (OOM_KILLED, 137)}
FAILURES = frozenset({IMAGE_PULL, OOM_KILLED, *RESTARTS})
PARTS_PER_MILLION = 1_000_000
LEASE_NAMESPACE = "kube-node-lease"
POD_NETWORK = ipaddress.ip_network("10.64.0.0/10")
NODE_NETWORK = ipaddress.ip_network("10.32.0.0/16")
MERGE_PATCH = "application/merge-patch+json"
# The conditions a kubelet owns; any other (PodScheduled, DisruptionTarget, ...) is kept as it is.
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def read_to_end(response: Any) -> None:
    """Read an answer taken with ``_preload_content=False`` to its end: only then does its
    connection go back to the pool (else every request opens a connection, TLS and all)."""
    response.data  # noqa: B018


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def api_time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def api_micro_time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class PodRecord:
    """What the simulator remembers of a pod bound to one of its nodes."""

    uid: str
    namespace: str
    name: str
    node: str
    stage: str = "accepted"  # accepted -> running | failed; "deleting" once its delete is finished
    pod_ip: str = ""
    started_at: str = ""
    manifest: dict[str, Any] | None = None
    restarts: int = 0
    ready: bool = False  # last reported Running and Ready by the simulator
    reconciling: bool = False  # a status reconcile is due (``PodKubelet._reconcile``)


def pod_conditions(
    pod: dict[str, Any], moment: dt.datetime, *, ready: bool, sandbox: bool, reason: str = ""
) -> list[dict[str, Any]]:
    stamp = api_time(moment)
    kept = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
    not_ready = {"status": "False", "reason": reason or "ContainersNotReady"}
    return kept + [
        {"type": "PodReadyToStartContainers", "status": "True" if sandbox else "False", "lastTransitionTime": stamp},
        {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
        {"type": "ContainersReady", "lastTransitionTime": stamp, **({"status": "True"} if ready else not_ready)},
        {"type": "Ready", "lastTransitionTime": stamp, **({"status": "True"} if ready else not_ready)},
    ]


def container_id(uid: str, name: str) -> str:
    return "containerd://" + hashlib.sha256(f"{uid}/{name}".encode()).hexdigest()


def container_statuses(pod: dict[str, Any], state: Callable[[dict[str, Any]], dict[str, Any]], *, ready: bool) -> dict[str, Any]:
    """``containerStatuses`` (and ``initContainerStatuses``) with ``state(container)`` for each app container.

    Init containers have completed; those with ``restartPolicy: Always`` (sidecars) are running.
    """
    spec = pod["spec"]
    uid = pod["metadata"]["uid"]
    started = (pod.get("status") or {}).get("startTime") or api_time(now())

    def status(container: dict[str, Any], container_state: dict[str, Any], is_ready: bool) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": container_id(uid, container["name"]) if "waiting" not in container_state else "",
            "ready": is_ready,
            "started": "running" in container_state,
            "restartCount": 0,
            "state": container_state,
        }

    statuses: dict[str, Any] = {"containerStatuses": [status(c, state(c), ready) for c in spec.get("containers", [])]}
    init = []
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            init.append(status(container, {"running": {"startedAt": started}}, True))
        else:
            done = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}}
            init.append(status(container, done, False))
    if init:
        statuses["initContainerStatuses"] = init
    return statuses


def get_profile_resource(node: FakeNode) -> str:
    """The instance-count resource of ``node``'s device profile (``volcano.sh/flexnpu-num``, ...)."""
    return get_profile(node.profile).resource_names()[0]


def requests_resource(manifest: dict[str, Any] | None, resource: str) -> bool:
    """Whether a container of the pod asks for ``resource`` (in its limits or requests)."""
    for container in ((manifest or {}).get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        if resource in (resources.get("limits") or {}) or resource in (resources.get("requests") or {}):
            return True
    return False


def checked_pod_ip(value: str | None) -> str | None:
    """``value`` as an IP address's text, or ``None``; ``ValueError`` saying so for anything else."""
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"pod_ip must be an IP address such as 127.0.0.1, got {value!r}") from None


class KubeletState:
    """What the simulator's parts share: the API clients, the fake nodes, the pods bound to them, the
    pool that talks to the API server, the timed steps, and the errors recorded on the way."""

    def __init__(
        self,
        api: client.ApiClient,
        nodes: Sequence[FakeNode],
        *,
        start_delay_seconds: float = 1.0,
        lease_duration_seconds: int = 10,
        kubelet_version: str = "v0.0.0",
        workers: int = 8,
        lease_workers: int = 2,
        pod_ip: str | None = None,
        restart_fraction: float = 0.0,
    ) -> None:
        if start_delay_seconds < 0:
            raise ValueError(f"start_delay_seconds must be 0 or more, got {start_delay_seconds!r}")
        pod_ip = checked_pod_ip(pod_ip)
        if len({node.name for node in nodes}) != len(nodes):
            raise ValueError("the fake nodes' names must be unique")
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.nodes = {node.name: node for node in nodes}
        self.start_delay_seconds = start_delay_seconds
        self.lease_duration_seconds = lease_duration_seconds
        self.kubelet_version = kubelet_version
        self._node_ips = {node.name: str(NODE_NETWORK[i + 10]) for i, node in enumerate(nodes)}
        self._lost: set[str] = set()
        # Each node's boot (a new id at each ``reboot_node``) and the nodes whose NPUs are not reported.
        self._boot_ids = {node.name: str(uuid.uuid4()) for node in nodes}
        self._npus_down: set[str] = set()
        self._pods: dict[str, PodRecord] = {}
        self._planned: dict[tuple[str, str], str] = {}
        self.pod_ip = pod_ip
        self._pod_ips = itertools.repeat(pod_ip) if pod_ip else (str(ip) for ip in itertools.islice(POD_NETWORK.hosts(), 1, None))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self._timer_wake = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="devcluster-kubelet")
        self._lease_pool = ThreadPoolExecutor(max_workers=lease_workers, thread_name_prefix="devcluster-lease")
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.restart_fraction = restart_fraction
        # When (wall clock) each pod, by namespace/name, was first seen bound to a node and first
        # reported Running and Ready: a benchmark splits its labs' start there.
        self.bound_at: dict[str, float] = {}
        self.ready_at: dict[str, float] = {}
        # Pods, by namespace/name, reported Ready again after another client (the node lifecycle
        # controller) marked them not Ready: how many times each.
        self.reconciled: dict[str, int] = {}

    @property
    def restart_fraction(self) -> float:
        return self._restart_ppm / PARTS_PER_MILLION

    @restart_fraction.setter
    def restart_fraction(self, fraction: float) -> None:
        """From now on, that share of the pods that start restart once (counted exactly: 0.1 is
        every tenth pod, not a tenth on average)."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"restart_fraction must be between 0 and 1, got {fraction!r}")
        with self._lock:
            self._restart_ppm = round(fraction * PARTS_PER_MILLION)
            self._restart_credit = 0

    def _later(self, seconds: float, step: Callable[..., None], *args: Any) -> None:
        """Run ``step(*args)`` on the pool in ``seconds``."""
        with self._timer_wake:
            action = lambda: self._pool.submit(self._guard, step, *args)  # noqa: E731
            heapq.heappush(self._timers, (time.monotonic() + seconds, next(self._timer_seq), action))
            self._timer_wake.notify()

    def _fire_timers(self) -> None:
        while not self._stop.is_set():
            due: list[Callable[[], None]] = []
            with self._timer_wake:
                now = time.monotonic()
                while self._timers and self._timers[0][0] <= now:
                    due.append(heapq.heappop(self._timers)[2])
                if not due:
                    wait = self._timers[0][0] - now if self._timers else None
                    self._timer_wake.wait(wait)
                    continue
            for action in due:
                if self._stop.is_set():
                    return
                try:
                    action()
                except RuntimeError:  # the pool was shut down
                    return

    def _guard(self, step: Callable[..., None], *args: Any) -> None:
        """Run one step; a failure is recorded (``errors``), not raised, unless the simulator is stopping."""
        try:
            step(*args)
        except Exception as exc:  # noqa: BLE001 - one pod's failed update must not stop the kubelet
            if not self._stop.is_set():
                self._record(f"{step.__name__}{args[:1] if args else ''}: {exc!r}")

    def _record(self, message: str) -> None:
        log.warning("node simulator: %s", message)
        with self._lock:
            self.errors.append(message)
