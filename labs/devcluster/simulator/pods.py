"""The pods bound to the fake nodes, as their kubelets run them: accepted, started, failed, restarted, deleted."""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from labs.devcluster.simulator.state import (
    FAILURE_ANNOTATION,
    FAILURES,
    IMAGE_PULL,
    IMAGE_PULL_BACKOFF,
    MERGE_PATCH,
    OOM_KILLED,
    PARTS_PER_MILLION,
    RESTART_ONCE,
    RESTARTS,
    KubeletState,
    PodRecord,
    api_time,
    container_statuses,
    now,
    pod_conditions,
    read_to_end,
)

# How soon a pod another client marked not Ready is reported Ready again (a kubelet's status manager
# compares the API server's status with its own every 10 s; sooner here, tests wait on it).
RECONCILE_SECONDS = 1.0


def marked_not_ready(pod: dict[str, Any]) -> bool:
    """Running with every container ready, yet not Ready: the node lifecycle controller's mark on
    the pods of a node it found NotReady, which only the pod's kubelet lifts."""
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and all(c.get("ready") for c in containers)
        and ready is not None
        and ready.get("status") != "True"
    )


def _pull_failure(reason: str, image: str) -> tuple[str, str, str]:
    """A kubelet's words for a failed pull of ``image``: (waiting message, event reason, event message)."""
    if reason == IMAGE_PULL:
        message = f'Failed to pull image "{image}": not found'
        return f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found', "Failed", message
    return f'Back-off pulling image "{image}"', "BackOff", f'Back-off pulling image "{image}"'


class PodKubelet(KubeletState):
    """Watches the pods bound to the fake nodes and reports each one's life, as a kubelet does."""

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
            reconcile = False
            if known is not None:
                known.manifest = pod
            if meta.get("deletionTimestamp"):
                if known is None or known.stage != "deleting":
                    known = known or PodRecord(meta["uid"], meta["namespace"], meta["name"], node)
                    known.stage = "deleting"
                    self._pods[meta["uid"]] = known
                    self._pool.submit(self._guard, self._finish_delete, meta["namespace"], meta["name"], meta["uid"])
                return
            if known is not None:
                reconcile = known.stage == "running" and known.ready and not known.reconciling and marked_not_ready(pod)
                known.reconciling = known.reconciling or reconcile
            elif (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self._pods[meta["uid"]] = PodRecord(meta["uid"], meta["namespace"], meta["name"], node, manifest=pod)
                self.bound_at.setdefault(f"{meta['namespace']}/{meta['name']}", time.time())
            else:
                return
        if reconcile:
            self._later(RECONCILE_SECONDS, self._reconcile, meta["uid"])  # ``_later`` takes the lock
        elif known is None:
            self._pool.submit(self._guard, self._accept, pod)

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Report ``status``, unless the pod is gone (deleted meanwhile: nobody to tell)."""
        meta = pod["metadata"]
        try:
            patch = self.core.patch_namespaced_pod_status
            answer = patch(meta["name"], meta["namespace"], {"status": status}, _content_type=MERGE_PATCH, _preload_content=False)
            read_to_end(answer)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _accept(self, pod: dict[str, Any]) -> None:
        """The pod is on the node: Pending, its containers being created."""
        moment = now()
        status = {
            "phase": "Pending",
            "hostIP": self._node_ips[pod["spec"]["nodeName"]],
            "hostIPs": [{"ip": self._node_ips[pod["spec"]["nodeName"]]}],
            "startTime": api_time(moment),
            "conditions": pod_conditions(pod, moment, ready=False, sandbox=False),
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
            pod.ready = failure is None
            moment = now()
            pod.started_at = api_time(moment)
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
                "conditions": pod_conditions(manifest, moment, ready=True, sandbox=True),
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
            pod.ready = False
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
                "conditions": pod_conditions(manifest, now(), ready=False, sandbox=True),
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
        moment = now()
        stamp = api_time(moment)
        terminated = {"exitCode": 137, "reason": OOM_KILLED, "startedAt": started_at or stamp, "finishedAt": stamp}
        if manifest["spec"].get("restartPolicy", "Always") == "Never":
            status = {
                "phase": "Failed",
                **network,
                "conditions": pod_conditions(manifest, moment, ready=False, sandbox=False, reason="PodFailed"),
                **container_statuses(manifest, lambda _c: {"terminated": terminated}, ready=False),
            }
        else:
            # A restarting container: back off after the kill, the kill kept as its last state.
            status = {
                "phase": "Running",
                **network,
                "conditions": pod_conditions(manifest, moment, ready=False, sandbox=True),
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
            pod.ready = False
            network = {"podIP": pod.pod_ip, "podIPs": [{"ip": pod.pod_ip}]}
            started_at, restarts, failed = pod.started_at, pod.restarts, pod.stage == "failed"
        moment = now()
        reason, exit_code = RESTARTS[failure]
        ended = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started_at or api_time(moment),
            "finishedAt": api_time(moment),
        }
        status = {
            "phase": "Failed" if failed else "Running",
            **network,
            "conditions": pod_conditions(manifest, moment, ready=False, sandbox=not failed, reason="PodFailed" if failed else ""),
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
            pod.ready = True
            moment = now()
            pod.started_at = api_time(moment)
            network = {"podIP": pod.pod_ip, "podIPs": [{"ip": pod.pod_ip}]}
            restarts = pod.restarts
        running = {"running": {"startedAt": api_time(moment)}}
        status = {
            "phase": "Running",
            **network,
            "conditions": pod_conditions(manifest, moment, ready=True, sandbox=True),
            **container_statuses(manifest, lambda _c: running, ready=True),
        }
        for entry in status["containerStatuses"]:
            entry.update(restartCount=restarts, lastState={"terminated": ended})
        self._patch_status(manifest, status)

    def _reconcile(self, uid: str) -> None:
        """Report Ready again a running pod another client marked not Ready (``marked_not_ready``),
        as a kubelet's status manager does when the API server's status is not its own. While the
        node is still NotReady the controller marks the pod again and this runs again."""
        with self._lock:
            pod = self._pods.get(uid)
            if pod is None:
                return
            pod.reconciling = False
            if pod.stage != "running" or not pod.ready or pod.node in self._lost:
                return
            namespace, name = pod.namespace, pod.name
        try:
            current = json.loads(self.core.read_namespaced_pod(name, namespace, _preload_content=False).data)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        if current["metadata"]["uid"] != uid or current["metadata"].get("deletionTimestamp") or not marked_not_ready(current):
            return
        stamp = api_time(now())
        conditions = [
            {"type": "Ready", "status": "True", "lastTransitionTime": stamp} if c.get("type") == "Ready" else c
            for c in current["status"]["conditions"]
        ]
        self._patch_status(current, {"conditions": conditions})
        with self._lock:
            key = f"{namespace}/{name}"
            self.reconciled[key] = self.reconciled.get(key, 0) + 1

    def _event(self, manifest: dict[str, Any], container: str, reason: str, message: str) -> None:
        meta = manifest["metadata"]
        stamp = api_time(now())
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
            read_to_end(self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False))
        except ApiException as exc:
            # A kubelet's events are best effort: none in a namespace being deleted, or gone.
            if exc.status not in (403, 404):
                raise

    def _finish_delete(self, namespace: str, name: str, uid: str) -> None:
        """The containers are gone: remove the pod for good (grace 0, only this pod, not a new one of the same name)."""
        body = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
        try:
            read_to_end(self.core.delete_namespaced_pod(name, namespace, body=body, _preload_content=False))
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
