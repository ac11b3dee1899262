"""The fake nodes as their kubelets keep them: registered, their status posted, their leases renewed."""

from __future__ import annotations

import json
import time

from kubernetes.client.exceptions import ApiException

from labs.devcluster.nodes import FakeNode
from labs.devcluster.simulator.state import LEASE_NAMESPACE, MERGE_PATCH, KubeletState, api_micro_time, api_time, now, read_to_end


class NodeKubelet(KubeletState):
    """Registers the fake nodes, posts their status and renews their leases."""

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
                "renewTime": api_micro_time(now()),
            },
        }
        try:
            read_to_end(self.coordination.create_namespaced_lease(LEASE_NAMESPACE, lease, _preload_content=False))
        except ApiException as exc:
            if exc.status != 409:
                raise
            self._renew(node.name)

    def _post_node_status(self, node: FakeNode) -> None:
        stamp = api_time(now())
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
        read_to_end(self.core.patch_node_status(node.name, {"status": status}, _content_type=MERGE_PATCH, _preload_content=False))

    def _renew(self, name: str) -> None:
        body = {"spec": {"holderIdentity": name, "renewTime": api_micro_time(now())}}
        lease = self.coordination.patch_namespaced_lease
        read_to_end(lease(name, LEASE_NAMESPACE, body, _content_type=MERGE_PATCH, _preload_content=False))

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
