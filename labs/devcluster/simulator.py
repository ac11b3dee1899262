"""A node simulator: the fake nodes' kubelets, without containers (KWOK's idea, in Python).

What a kubelet tells the API server, and nothing it does on the host:

* registers each fake node (the Node, then its status: Ready, capacity, allocatable, addresses)
  and keeps its Lease in ``kube-node-lease`` renewed, so the node lifecycle controller of the
  real controller-manager sees a live node;
* watches the pods bound to its nodes: a new one goes to Pending/ContainerCreating at once and,
  ``start_delay_seconds`` later, to Running and Ready (pod IP, conditions, container statuses);
  each pod gets an address of its own from ``POD_NETWORK``, or every pod the one ``pod_ip``
  (a server on this machine that answers for all of them, as a benchmark's stub does);
* finishes the delete of a pod being deleted (a kubelet's last step: delete with grace 0);
* fails a pod on request (``fail_pod``, or the pod's ``FAILURE_ANNOTATION``): ``ErrImagePull``
  (waiting ``ErrImagePull``, then ``ImagePullBackOff``, with the kubelet's events) or
  ``OOMKilled`` (terminated ``OOMKilled``, exit code 137; with ``restartPolicy: Never`` the pod
  is Failed);
* restarts a pod's container once on request (``fail_pod`` with ``RestartOnce``: it ends with
  ``Error``, exit code 1, as a FlexNPU lab may while its instance initialises; ``OOMKilledOnce``:
  killed for memory), or every so many pods as they start (``restart_fraction``, e.g. 0.1: every
  tenth, as when a class's FlexNPU instances are created at once): terminated first, then,
  ``start_delay_seconds`` later, running and Ready again with ``restartCount`` 1 and the end as
  its ``lastState`` (with ``restartPolicy: Never`` the pod is Failed instead);
* restarts a node on request (``reboot_node``), as an unexpected reboot does: its status comes
  with a new ``nodeInfo.bootID`` and its NPU resources at 0 (the device plugin has not reported
  them yet), and each of its NPU pods (those asking for the profile's device) is Failed
  (``UnexpectedAdmissionError``, the kubelet's words for a pod whose devices it cannot allocate)
  — the CCE FlexNPU guide's "执行失败" after a restart; other pods are left running.
  ``devices_after_seconds`` later the NPU resources are back and, with ``pods_come_back``, each
  pod runs and is Ready again with one restart more;
* loses a node on request (``lose_node``): its lease is no longer renewed and its pods are left
  alone, so the controller-manager marks it NotReady after its grace period, as for a node that
  died.

The simulator's threads: one renews leases (spread evenly over the renewal period, onto a pool of
their own, so a thousand nodes do not renew in one burst), one watches pods, one fires timed
steps onto a small pool that talks to the API server. Nodes register side by side on that pool.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import heapq
import ipaddress
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

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


def _read(response: Any) -> None:
    """Read an answer taken with ``_preload_content=False`` to its end: only then does its
    connection go back to the pool (else every request opens a connection, TLS and all)."""
    response.data  # noqa: B018


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Pod:
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


def _conditions(
    pod: dict[str, Any], moment: dt.datetime, *, ready: bool, sandbox: bool, reason: str = ""
) -> list[dict[str, Any]]:
    stamp = _time(moment)
    kept = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
    not_ready = {"status": "False", "reason": reason or "ContainersNotReady"}
    return kept + [
        {"type": "PodReadyToStartContainers", "status": "True" if sandbox else "False", "lastTransitionTime": stamp},
        {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
        {"type": "ContainersReady", "lastTransitionTime": stamp, **({"status": "True"} if ready else not_ready)},
        {"type": "Ready", "lastTransitionTime": stamp, **({"status": "True"} if ready else not_ready)},
    ]


def _pull_failure(reason: str, image: str) -> tuple[str, str, str]:
    """A kubelet's words for a failed pull of ``image``: (waiting message, event reason, event message)."""
    if reason == IMAGE_PULL:
        message = f'Failed to pull image "{image}": not found'
        return f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found', "Failed", message
    return f'Back-off pulling image "{image}"', "BackOff", f'Back-off pulling image "{image}"'


def _container_id(uid: str, name: str) -> str:
    return "containerd://" + hashlib.sha256(f"{uid}/{name}".encode()).hexdigest()


def container_statuses(pod: dict[str, Any], state: Callable[[dict[str, Any]], dict[str, Any]], *, ready: bool) -> dict[str, Any]:
    """``containerStatuses`` (and ``initContainerStatuses``) with ``state(container)`` for each app container.

    Init containers have completed; those with ``restartPolicy: Always`` (sidecars) are running.
    """
    spec = pod["spec"]
    uid = pod["metadata"]["uid"]
    started = (pod.get("status") or {}).get("startTime") or _time(_now())

    def status(container: dict[str, Any], container_state: dict[str, Any], is_ready: bool) -> dict[str, Any]:
        return {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": _container_id(uid, container["name"]) if "waiting" not in container_state else "",
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


def _requests(manifest: dict[str, Any] | None, resource: str) -> bool:
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


class NodeSimulator:
    """The kubelets of ``nodes``, talking to the API server through ``api`` (a ``kubernetes`` ``ApiClient``).

    ``pod_ip``: the address every pod reports (``status.podIP``); ``None``: one of its own each.
    ``restart_fraction``: the share of pods whose container restarts once as it starts (settable).
    """

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
        self._pods: dict[str, _Pod] = {}
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

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Register the nodes and their leases (side by side on the pool), then start the threads."""
        for _ in self._pool.map(self._register, self.nodes.values()):
            pass  # the first node that failed to register raises here
        for target, name in ((self._renew_leases, "leases"), (self._watch_pods, "pods"), (self._fire_timers, "timers")):
            thread = threading.Thread(target=target, name=f"devcluster-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every thread (the pod watch ends when its connection does: stop the API server first, or wait)."""
        self._stop.set()
        with self._timer_wake:
            self._timer_wake.notify_all()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._lease_pool.shutdown(wait=True, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    # -- requests from tests ---------------------------------------------------------------------

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

    def fail_pod(self, namespace: str, name: str, failure: str) -> None:
        """Fail the pod ``namespace/name`` with ``failure`` (``ErrImagePull`` or ``OOMKilled``), or
        restart its container once (``RestartOnce``, ``OOMKilledOnce``).

        A pod that has not started yet (or does not exist yet) fails when it would have started;
        a running one fails now.
        """
        if failure not in FAILURES:
            raise ValueError(f"unknown failure {failure!r}; choose one of {', '.join(sorted(FAILURES))}")
        with self._lock:
            pod = next((p for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)), None)
            if pod is None or pod.stage == "accepted":
                self._planned[(namespace, name)] = failure
                return
            manifest = pod.manifest
        if manifest is not None:
            self._pool.submit(self._guard, self._restart if failure in RESTARTS else self._fail, manifest, failure)

    def lose_node(self, name: str) -> None:
        """Stop being ``name``'s kubelet: no lease renewal, no pod updates; the controller-manager marks it NotReady."""
        self._known(name)
        with self._lock:
            self._lost.add(name)

    def restore_node(self, name: str) -> None:
        """``name``'s kubelet is back: Ready again, lease renewed."""
        self._known(name)
        with self._lock:
            self._lost.discard(name)
        self._post_node_status(self.nodes[name])
        self._renew(name)

    def boot_id(self, name: str) -> str:
        """The ``status.nodeInfo.bootID`` node ``name`` reports now."""
        self._known(name)
        with self._lock:
            return self._boot_ids[name]

    def reboot_node(self, name: str, *, devices_after_seconds: float | None = 1.0, pods_come_back: bool = True) -> None:
        """Restart ``name`` now (see the module docstring): a new boot id, its NPUs unreported and its
        NPU pods Failed (the others are admitted again at once: their restart is not simulated);
        ``devices_after_seconds`` later (``None``: never) the NPUs reported again and, with
        ``pods_come_back``, its NPU pods running again."""
        self._known(name)
        if devices_after_seconds is not None and devices_after_seconds < 0:
            raise ValueError(f"devices_after_seconds must be 0 or more, got {devices_after_seconds!r}")
        count = get_profile_resource(self.nodes[name])
        with self._lock:
            self._boot_ids[name] = str(uuid.uuid4())
            self._npus_down.add(name)
            # Only the NPU pods: the kubelet admits the others again at once (their restart is not
            # simulated), and it is the device plugin's allocation that fails an NPU pod.
            pods = [
                p
                for p in self._pods.values()
                if p.node == name and p.stage in ("accepted", "running") and _requests(p.manifest, count)
            ]
            for pod in pods:
                pod.stage = "rebooted"
            manifests = [p.manifest for p in pods if p.manifest is not None]
        # The kubelet reports its node first, then the pods it cannot admit.
        self._post_node_status(self.nodes[name])
        for manifest in manifests:
            self._pool.submit(self._guard, self._reject_after_reboot, manifest)
        if devices_after_seconds is not None:
            self._later(devices_after_seconds, self._devices_back, name, manifests if pods_come_back else [])

    def _reject_after_reboot(self, manifest: dict[str, Any]) -> None:
        moment = _now()
        count = get_profile_resource(self.nodes[manifest["spec"]["nodeName"]])
        message = (
            f"Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices {count}, "
            "which is unexpected"
        )
        ended = {"exitCode": 137, "reason": "ContainerStatusUnknown", "finishedAt": _time(moment), "startedAt": _time(moment)}
        status = {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": message,
            "conditions": _conditions(manifest, moment, ready=False, sandbox=False, reason="PodFailed"),
            **container_statuses(manifest, lambda _c: {"terminated": ended}, ready=False),
        }
        self._patch_status(manifest, status)

    def _devices_back(self, name: str, manifests: list[dict[str, Any]]) -> None:
        """The device plugin reports the NPUs again; the pods that come back run again, one restart more.

        The pods first: a kubelet reports a pod's status as it changes, its node's only every
        ``nodeStatusUpdateFrequency`` (10 s), so the node's resources come back after its pods.
        """
        with self._lock:
            self._npus_down.discard(name)
        for manifest in manifests:
            with self._lock:
                pod = self._pods.get(manifest["metadata"]["uid"])
                if pod is None or pod.stage != "rebooted":
                    continue
                pod.stage = "running"
                if not pod.pod_ip:
                    pod.pod_ip = next(self._pod_ips)
            self._run_again(manifest, {"exitCode": 137, "reason": "ContainerStatusUnknown"})
        self._post_node_status(self.nodes[name])

    def report_status(self, names: Sequence[str]) -> None:
        """Post these nodes' status again, side by side, as a kubelet does every few minutes: each
        is an update of the Node for the controllers that missed the last one."""
        for name in names:
            self._known(name)
        for _ in self._pool.map(self._post_node_status, [self.nodes[name] for name in names]):
            pass

    def _known(self, name: str) -> None:
        if name not in self.nodes:
            raise ValueError(f"{name!r} is not one of the simulated nodes")

    # -- nodes and leases ------------------------------------------------------------------------

    def _register(self, node: FakeNode) -> None:
        # Raw answers (``_preload_content=False``) here and in every call of the simulator: the
        # client's model classes cost more CPU than the request, a thousand nodes over.
        try:
            created = self.core.create_node(node.manifest(), _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
            created = self.core.read_node(node.name, _preload_content=False)
        uid = json.loads(created.data)["metadata"]["uid"]
        self._post_node_status(node)
        lease = {
            "metadata": {
                "name": node.name,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": uid}],
            },
            "spec": {
                "holderIdentity": node.name,
                "leaseDurationSeconds": self.lease_duration_seconds,
                "renewTime": _micro_time(_now()),
            },
        }
        try:
            _read(self.coordination.create_namespaced_lease(LEASE_NAMESPACE, lease, _preload_content=False))
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._renew(node.name)

    def _post_node_status(self, node: FakeNode) -> None:
        stamp = _time(_now())
        healthy = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        capacity = node.capacity()
        with self._lock:
            boot_id, npus_down = self._boot_ids[node.name], node.name in self._npus_down
        # Until the device plugin reports after a restart, its resources are allocatable at 0.
        allocatable = {**capacity, **dict.fromkeys(node.npu_resources(), "0")} if npus_down else capacity
        status = {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                {"type": kind, "status": value, "reason": reason, "message": "simulated by labs.devcluster",
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
                for kind, value, reason in healthy
            ],
            "addresses": [
                {"type": "InternalIP", "address": self._node_ips[node.name]},
                {"type": "Hostname", "address": node.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": boot_id, "kernelVersion": "", "osImage": "simulated",
                "containerRuntimeVersion": "devcluster://simulated", "kubeletVersion": self.kubelet_version,
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            },
        }
        _read(self.core.patch_node_status(node.name, {"status": status}, _content_type=MERGE_PATCH, _preload_content=False))

    def _renew(self, name: str) -> None:
        body = {"spec": {"holderIdentity": name, "renewTime": _micro_time(_now())}}
        lease = self.coordination.patch_namespaced_lease
        _read(lease(name, LEASE_NAMESPACE, body, _content_type=MERGE_PATCH, _preload_content=False))

    @property
    def renew_interval_seconds(self) -> float:
        """A kubelet renews its lease at a quarter of the lease's duration."""
        return self.lease_duration_seconds / 4

    def _renew_leases(self) -> None:
        """Every node's lease once a period, the renewals spread evenly over it (as independent
        kubelets' are), each on the lease pool: a slow answer delays no other node's renewal."""
        interval = self.renew_interval_seconds
        period_start = time.monotonic()
        while not self._stop.is_set():
            period_start += interval
            with self._lock:
                live = [name for name in self.nodes if name not in self._lost]
            for i, name in enumerate(live):
                due = period_start + interval * i / len(live)
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return
                with self._lock:
                    if name in self._lost:  # lost since the period began
                        continue
                try:
                    self._lease_pool.submit(self._guard, self._renew, name)
                except RuntimeError:  # the pool was shut down: stopping
                    return
            if self._stop.wait(max(0.0, period_start + interval - time.monotonic())):
                return

    # -- pods ------------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        """List, then watch from the list's version; list again when the version is too old (410)."""
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    listed = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", _preload_content=False)
                    body = json.loads(listed.data)
                    for item in body["items"]:
                        self._see("ADDED", item)
                    version = body["metadata"]["resourceVersion"]
                response = self.core.list_pod_for_all_namespaces(
                    field_selector="spec.nodeName!=",
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=10,
                    watch=True,
                    _preload_content=False,
                )
                try:
                    for line in iter_resp_lines(response):
                        if self._stop.is_set():
                            return
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            version = ""  # 410 Gone, or another error: list again
                            break
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._see(event["type"], event["object"])
                finally:
                    response.release_conn()
            except ApiException as exc:
                if self._stop.is_set():
                    return
                version = "" if exc.status == 410 else version
                self._record(f"watching pods: {exc.status} {exc.reason}")
                self._stop.wait(0.5)
            except Exception as exc:  # noqa: BLE001 - the API server going away ends the watch
                if self._stop.is_set():
                    return
                self._record(f"watching pods: {exc!r}")
                self._stop.wait(0.5)

    def _see(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        node = pod["spec"].get("nodeName", "")
        if node not in self.nodes:
            return
        with self._lock:
            if node in self._lost:
                return
            if kind == "DELETED":
                self._pods.pop(meta["uid"], None)
                self._planned.pop((meta["namespace"], meta["name"]), None)
                return
            known = self._pods.get(meta["uid"])
            if known is not None:
                known.manifest = pod
            if meta.get("deletionTimestamp"):
                if known is None or known.stage != "deleting":
                    known = known or _Pod(meta["uid"], meta["namespace"], meta["name"], node)
                    known.stage = "deleting"
                    self._pods[meta["uid"]] = known
                    self._pool.submit(self._guard, self._finish_delete, meta["namespace"], meta["name"], meta["uid"])
                return
            if known is not None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            self._pods[meta["uid"]] = _Pod(meta["uid"], meta["namespace"], meta["name"], node, manifest=pod)
            self.bound_at.setdefault(f"{meta['namespace']}/{meta['name']}", time.time())
        self._pool.submit(self._guard, self._accept, pod)

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Report ``status``, unless the pod is gone (deleted meanwhile: nobody to tell)."""
        meta = pod["metadata"]
        try:
            patch = self.core.patch_namespaced_pod_status
            _read(patch(meta["name"], meta["namespace"], {"status": status}, _content_type=MERGE_PATCH, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _accept(self, pod: dict[str, Any]) -> None:
        """The pod is on the node: Pending, its containers being created."""
        moment = _now()
        status = {
            "phase": "Pending",
            "hostIP": self._node_ips[pod["spec"]["nodeName"]],
            "hostIPs": [{"ip": self._node_ips[pod["spec"]["nodeName"]]}],
            "startTime": _time(moment),
            "conditions": _conditions(pod, moment, ready=False, sandbox=False),
            **container_statuses(pod, lambda _c: {"waiting": {"reason": "ContainerCreating"}}, ready=False),
        }
        self._patch_status(pod, status)
        # Only now: a start reported before this Pending would be overwritten by it.
        self._later(self.start_delay_seconds, self._start, pod["metadata"]["uid"])

    def _start(self, uid: str) -> None:
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None or pod.stage != "accepted" or pod.node in self._lost or pod.manifest is None:
                return
            manifest = pod.manifest
            failure = self._planned.pop((pod.namespace, pod.name), None) or (manifest["metadata"].get("annotations") or {}).get(
                FAILURE_ANNOTATION
            )
            if failure is None and self._restart_ppm:
                self._restart_credit += self._restart_ppm
                if self._restart_credit >= PARTS_PER_MILLION:
                    self._restart_credit -= PARTS_PER_MILLION
                    failure = RESTART_ONCE
            pod.pod_ip = next(self._pod_ips)
            pod.stage = "running"
            moment = _now()
            pod.started_at = _time(moment)
        if failure in RESTARTS:
            self._restart(manifest, failure)
            return
        if failure in FAILURES:
            self._fail(manifest, failure)
            return
        running = {"running": {"startedAt": pod.started_at}}
        self._patch_status(
            manifest,
            {
                "phase": "Running",
                "podIP": pod.pod_ip,
                "podIPs": [{"ip": pod.pod_ip}],
                "conditions": _conditions(manifest, moment, ready=True, sandbox=True),
                **container_statuses(manifest, lambda _c: running, ready=True),
            },
        )
        self.ready_at.setdefault(f"{pod.namespace}/{pod.name}", time.time())

    def _fail(self, manifest: dict[str, Any], failure: str) -> None:
        uid = manifest["metadata"]["uid"]
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None or pod.stage == "deleting":
                return
            pod.stage = "failed"
            if not pod.pod_ip:
                pod.pod_ip = next(self._pod_ips)
            network = {"podIP": pod.pod_ip, "podIPs": [{"ip": pod.pod_ip}]}
            started_at = pod.started_at
        if failure == IMAGE_PULL:
            self._image_pull_failure(manifest, network, IMAGE_PULL)
            # A kubelet backs off after a failed pull; the pod says so until it is deleted.
            backoff = min(1.0, self.start_delay_seconds or 0.2)
            self._later(backoff, self._image_pull_failure, manifest, network, IMAGE_PULL_BACKOFF)
        else:
            self._oom_kill(manifest, network, started_at)

    def _image_pull_failure(self, manifest: dict[str, Any], network: dict[str, str], reason: str) -> None:
        with self._lock:
            pod = self._pods.get(manifest["metadata"]["uid"])
            if pod is None or pod.stage != "failed":
                return
        containers = {c["name"]: c.get("image", "") for c in manifest["spec"].get("containers", [])}
        self._patch_status(
            manifest,
            {
                "phase": "Pending",
                **network,
                "conditions": _conditions(manifest, _now(), ready=False, sandbox=True),
                **container_statuses(
                    manifest,
                    lambda c: {"waiting": {"reason": reason, "message": _pull_failure(reason, containers[c["name"]])[0]}},
                    ready=False,
                ),
            },
        )
        for name, image in containers.items():
            _message, event_reason, event_message = _pull_failure(reason, image)
            self._event(manifest, name, event_reason, event_message)

    def _oom_kill(self, manifest: dict[str, Any], network: dict[str, str], started_at: str) -> None:
        moment = _now()
        stamp = _time(moment)
        terminated = {"exitCode": 137, "reason": OOM_KILLED, "startedAt": started_at or stamp, "finishedAt": stamp}
        if manifest["spec"].get("restartPolicy", "Always") == "Never":
            status = {
                "phase": "Failed",
                **network,
                "conditions": _conditions(manifest, moment, ready=False, sandbox=False, reason="PodFailed"),
                **container_statuses(manifest, lambda _c: {"terminated": terminated}, ready=False),
            }
        else:
            # A restarting container: back off after the kill, the kill kept as its last state.
            status = {
                "phase": "Running",
                **network,
                "conditions": _conditions(manifest, moment, ready=False, sandbox=True),
                **container_statuses(manifest, lambda _c: {"waiting": {"reason": "CrashLoopBackOff"}}, ready=False),
            }
            for entry in status["containerStatuses"]:
                entry.update(restartCount=1, lastState={"terminated": terminated})
        self._patch_status(manifest, status)

    def _restart(self, manifest: dict[str, Any], failure: str) -> None:
        """The container ends (``RESTARTS[failure]``); ``start_delay_seconds`` later it runs again, one restart more."""
        uid = manifest["metadata"]["uid"]
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None or pod.stage != "running":
                return
            if manifest["spec"].get("restartPolicy", "Always") == "Never":
                pod.stage = "failed"
            network = {"podIP": pod.pod_ip, "podIPs": [{"ip": pod.pod_ip}]}
            started_at, restarts, failed = pod.started_at, pod.restarts, pod.stage == "failed"
        moment = _now()
        reason, exit_code = RESTARTS[failure]
        ended = {"exitCode": exit_code, "reason": reason, "startedAt": started_at or _time(moment), "finishedAt": _time(moment)}
        status = {
            "phase": "Failed" if failed else "Running",
            **network,
            "conditions": _conditions(manifest, moment, ready=False, sandbox=not failed, reason="PodFailed" if failed else ""),
            **container_statuses(manifest, lambda _c: {"terminated": ended}, ready=False),
        }
        for entry in status["containerStatuses"]:
            entry["restartCount"] = restarts
        self._patch_status(manifest, status)
        if not failed:
            self._later(self.start_delay_seconds, self._run_again, manifest, ended)

    def _run_again(self, manifest: dict[str, Any], ended: dict[str, Any]) -> None:
        with self._lock:
            pod = self._pods.get(manifest["metadata"]["uid"])
            if pod is None or pod.stage != "running" or pod.node in self._lost:
                return
            pod.restarts += 1
            moment = _now()
            pod.started_at = _time(moment)
            network = {"podIP": pod.pod_ip, "podIPs": [{"ip": pod.pod_ip}]}
            restarts = pod.restarts
        running = {"running": {"startedAt": _time(moment)}}
        status = {
            "phase": "Running",
            **network,
            "conditions": _conditions(manifest, moment, ready=True, sandbox=True),
            **container_statuses(manifest, lambda _c: running, ready=True),
        }
        for entry in status["containerStatuses"]:
            entry.update(restartCount=restarts, lastState={"terminated": ended})
        self._patch_status(manifest, status)

    def _event(self, manifest: dict[str, Any], container: str, reason: str, message: str) -> None:
        meta = manifest["metadata"]
        stamp = _time(_now())
        node = manifest["spec"]["nodeName"]
        event = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                "uid": meta["uid"], "fieldPath": f"spec.containers{{{container}}}",
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "kubelet", "host": node},
            "reportingComponent": "kubelet",
            "reportingInstance": node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            _read(self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False))
        except ApiException as exc:
            # A kubelet's events are best effort: none in a namespace being deleted, or gone.
            if exc.status not in (403, 404):
                raise

    def _finish_delete(self, namespace: str, name: str, uid: str) -> None:
        """The containers are gone: remove the pod for good (grace 0, only this pod, not a new one of the same name)."""
        body = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
        try:
            _read(self.core.delete_namespaced_pod(name, namespace, body=body, _preload_content=False))
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    # -- timers and errors -----------------------------------------------------------------------

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

