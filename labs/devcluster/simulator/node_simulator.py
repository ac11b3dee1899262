"""``NodeSimulator``: the fake nodes' kubelets, started, stopped and asked to fail (see the package docstring)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from labs.devcluster.simulator.node_status import NodeKubelet
from labs.devcluster.simulator.pods import RECONCILE_SECONDS, PodKubelet
from labs.devcluster.simulator.state import (
    FAILURES,
    RESTARTS,
    api_time,
    container_statuses,
    get_profile_resource,
    now,
    pod_conditions,
    requests_resource,
)


class NodeSimulator(NodeKubelet, PodKubelet):
    """The kubelets of ``nodes``, talking to the API server through ``api`` (a ``kubernetes`` ``ApiClient``).

    ``pod_ip``: the address every pod reports (``status.podIP``); ``None``: one of its own each.
    ``restart_fraction``: the share of pods whose container restarts once as it starts (settable).
    """

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
            # Its pods' status as the kubelet left it: those the controller marked not Ready meanwhile
            # are reported Ready again (``_reconcile``), as a kubelet's status manager does on return.
            running = [p for p in self._pods.values() if p.node == name and p.stage == "running" and p.ready]
            for pod in running:
                pod.reconciling = True
        self._post_node_status(self.nodes[name])
        self._renew(name)
        for pod in running:
            self._later(RECONCILE_SECONDS, self._reconcile, pod.uid)

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
                if p.node == name and p.stage in ("accepted", "running") and requests_resource(p.manifest, count)
            ]
            for pod in pods:
                pod.stage = "rebooted"
                pod.ready = False
            manifests = [p.manifest for p in pods if p.manifest is not None]
        # The kubelet reports its node first, then the pods it cannot admit.
        self._post_node_status(self.nodes[name])
        for manifest in manifests:
            self._pool.submit(self._guard, self._reject_after_reboot, manifest)
        if devices_after_seconds is not None:
            self._later(devices_after_seconds, self._devices_back, name, manifests if pods_come_back else [])

    def _reject_after_reboot(self, manifest: dict[str, Any]) -> None:
        moment = now()
        count = get_profile_resource(self.nodes[manifest["spec"]["nodeName"]])
        message = (
            f"Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices {count}, "
            "which is unexpected"
        )
        ended = {
            "exitCode": 137,
            "reason": "ContainerStatusUnknown",
            "finishedAt": api_time(moment),
            "startedAt": api_time(moment),
        }
        status = {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": message,
            "conditions": pod_conditions(manifest, moment, ready=False, sandbox=False, reason="PodFailed"),
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
