"""The Kubernetes driver's reads: lab pods, the pods on a node, nodes, and a pod's state as a ``PollResult``."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.domain.reasons import Reason
from labs.drivers.base import DriverError, NodeBoot, NodePod, NodeStatus, Observed, PollResult, PollStatus
from labs.drivers.kubernetes import builders
from labs.drivers.kubernetes.api import KubernetesApi, PodMetadataApi, list_items
from labs.drivers.kubernetes.options import DNS_NAME
from labs.drivers.kubernetes.pods import (
    IMAGE_PULL_FAILURES,
    START_FAILURES,
    STARTING,
    age_seconds,
    pod_labels,
    pod_restarts,
    positive_quantity,
    restarted_after,
    terminated_reason,
    whole_quantity,
)
from labs.drivers.kubernetes.profiles import HOSTNAME_LABEL, VNPU_REGISTER_ANNOTATION, DeviceProfile, parse_vnpu_register
from labs.drivers.statefile import canonical_session_id

logger = logging.getLogger(__name__)


class ClusterReader(KubernetesApi):
    """Every read of ``KubernetesDriver``: the lab pods (as ``Observed``), the pods on a node, the nodes."""

    core: client.CoreV1Api
    metadata_api: PodMetadataApi
    namespace_prefix: str
    pod_options: builders.PodOptions
    spawn_timeout_seconds: float
    profile_of: Callable[[Mapping[str, str]], DeviceProfile]

    def _read_pod(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The pod as plain JSON, or ``None`` if there is none of that name."""
        read = self.core.read_namespaced_pod
        try:
            answer = self._call("reading the lab pod", read, name, namespace, passthrough=(404,), _preload_content=False)
        except ApiException:
            return None
        return json.loads(answer.data)

    def _list_pods(self, selector: str) -> list[dict[str, Any]]:
        """The lab pods matching ``selector`` in every namespace, as the API server's JSON.

        Read as plain JSON, not the client's model objects: at a class's size (hundreds of pods,
        every controller round) building those costs the worker ten times the request.
        """
        listing = self.core.list_pod_for_all_namespaces
        answer = self._call("listing lab pods", listing, label_selector=selector, _preload_content=False)
        items = list_items(answer, "the list of lab pods with something that is not a pod list")
        # Filtered here too: the selector is the API server's job, but a wrong pod here would be deleted.
        return [pod for pod in items if isinstance(pod, dict) and self._owns(pod.get("metadata") or {})]

    def pods_on(self, node: str) -> dict[str, NodePod]:
        """Every pod bound to ``node``, in every namespace and of every owner, read as metadata only.

        One list per call with ``fieldSelector=spec.nodeName=<node>``, under the cluster-wide pod
        reader the portal holds already (``deploy/base/rbac.yaml``): the portal's labs and
        anyone else's, so the reconciler can tell a residual instance (no pod of its UID) from
        a foreign one (another owner's pod) as the FlexNPU guide does.
        """
        if not DNS_NAME.fullmatch(node):
            raise DriverError(f"Not a node name: {node!r}.")
        listing = self.metadata_api.list_pod_for_all_namespaces
        answer = self._call(f"listing the pods on node {node}", listing, field_selector=f"spec.nodeName={node}")
        items = list_items(answer, f"the list of pods on {node} with something that is not a list")
        pods = {}
        for item in items:
            metadata = (item.get("metadata") if isinstance(item, dict) else None) or {}
            uid = metadata.get("uid")
            if uid:
                name = f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"
                pods[uid] = NodePod(uid, name, portal=self._owns(metadata))
        return pods

    def nodes(self) -> dict[str, NodeBoot]:
        """Every node's ``status.nodeInfo.bootID`` and whether its pool's device profile's instance
        count (``volcano.sh/flexnpu-num``, ``huawei.com/vnpu-number``, ...) is allocatable, above 0.

        One list of nodes (``nodes: list``, ``deploy/base/rbac.yaml``), read as plain JSON. The
        controller asks only while a lab's pod shows failed or a node that restarted waits for its
        NPUs, and the reconciler once a period.
        """
        answer = self._call("listing the nodes", self.core.list_node, _preload_content=False)
        items = list_items(answer, "the list of nodes with something that is not a list")
        boots = {}
        for item in items:
            if not isinstance(item, dict):
                continue
            metadata, status = item.get("metadata") or {}, item.get("status") or {}
            name = metadata.get("name")
            if not name:
                continue
            count = self.profile_of(metadata.get("labels") or {}).resource_names()[0]
            boots[name] = NodeBoot(
                boot_id=str((status.get("nodeInfo") or {}).get("bootID") or ""),
                npus_reported=positive_quantity((status.get("allocatable") or {}).get(count)),
            )
        return boots

    def node_status(self, node: str) -> NodeStatus:
        """The node object, read as JSON (``get`` on nodes, the portal's one cluster-wide read besides pods).

        The profile is the pool's, by the node's labels as the cluster holds them; its resources
        are the node's ``status.allocatable`` (else ``capacity``) of the profile's instance,
        core and memory resources, 0 for one the device plugin has not registered.
        """
        if not DNS_NAME.fullmatch(node):
            raise DriverError(f"Not a node name: {node!r}.")
        try:
            answer = self._call(f"reading node {node}", self.core.read_node, node, passthrough=(404,), _preload_content=False)
        except ApiException:
            return NodeStatus(profile=self.profile.name, exists=False)
        try:
            body = json.loads(answer.data)
            metadata = body.get("metadata") or {}
            labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
            register = str((metadata.get("annotations") or {}).get(VNPU_REGISTER_ANNOTATION) or "")
            status = body.get("status") or {}
            amounts = status.get("allocatable") or status.get("capacity") or {}
        except (ValueError, AttributeError) as exc:
            raise DriverError(f"The cluster API answered node {node} with something that is not a node.") from exc
        profile = self.profile_of(labels)
        resources = {name: whole_quantity(amounts.get(name)) for name in profile.resource_names()[:3]}
        devices = parse_vnpu_register(register) if register else None
        if register and devices is None:
            logger.warning("node %s: %s is not in the expected format; its die ids are not used", node, VNPU_REGISTER_ANNOTATION)
        return NodeStatus(profile=profile.name, labels=labels, resources=resources, devices=devices or ())

    def _session_pods(self, session_id: str) -> list[dict[str, Any]]:
        pods = self._list_pods(f"{builders.SESSION_LABEL}={session_id}")
        return [pod for pod in pods if pod_labels(pod).get(builders.SESSION_LABEL) == session_id]

    def _owns(self, metadata: Mapping[str, Any]) -> bool:
        labels = metadata.get("labels") or {}
        return (
            all(labels.get(key) == value for key, value in builders.MANAGED_BY.items())
            and labels.get("app.kubernetes.io/component") == "lab-session"
            and str(metadata.get("namespace") or "").startswith(self.namespace_prefix)
        )

    def observe(self) -> dict[str, Observed]:
        """One list of every lab pod (all course namespaces), read into ``Observed`` records."""
        observed: dict[str, Observed] = {}
        for pod in self._list_pods(builders.SESSION_SELECTOR):
            try:
                session_id = canonical_session_id(pod_labels(pod).get(builders.SESSION_LABEL))
            except DriverError:
                continue  # a hand-made pod with our labels but no session id
            result = self._pod_result(pod, session_id)
            spec = pod.get("spec") or {}
            metadata = pod.get("metadata") or {}
            restarts, last_exit = pod_restarts(pod)
            observed[session_id] = Observed(
                session_id,
                result.status,
                ref=metadata.get("uid") or "",
                reason=result.reason,
                access_url=result.access_url,
                # Where it runs once scheduled, else where it is pinned.
                node=spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL, ""),
                deleting=metadata.get("deletionTimestamp") is not None,
                restarts=restarts,
                last_exit=last_exit,
            )
        return observed

    def _pod_result(self, pod: dict[str, Any], session_id: str) -> PollResult:
        metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
        if metadata.get("deletionTimestamp"):
            evicted = (conditions.get("DisruptionTarget") or {}).get("status") == "True" and (
                conditions["DisruptionTarget"].get("reason") == "DeletionByTaintManager"
            )
            if evicted:  # the node stopped answering for longer than the pod tolerates
                return PollResult(PollStatus.FAILED, reason=Reason.of("driver.node_lost", node=spec.get("nodeName") or "?"))
            return PollResult(PollStatus.FAILED, reason=Reason.of("driver.being_stopped"))
        if phase in {"Failed", "Succeeded"}:
            return PollResult(PollStatus.FAILED, reason=Reason.of("driver.lab_stopped", cause=self._stop_reason(pod, phase)))
        policy = spec.get("restartPolicy") or "Always"
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting") or {}, state.get("terminated")
            if waiting.get("reason") in IMAGE_PULL_FAILURES:
                reason = Reason.of("driver.image_pull_failed", detail=waiting.get("message") or waiting["reason"])
                return PollResult(PollStatus.FAILED, reason=reason)
            if waiting.get("reason") in START_FAILURES:
                reason = Reason.of("driver.container_not_started", detail=waiting.get("message") or waiting["reason"])
                return PollResult(PollStatus.FAILED, reason=reason)
            if terminated and not restarted_after(terminated, policy):
                reason = Reason.of("driver.lab_stopped", cause=terminated_reason(terminated, pod))
                return PollResult(PollStatus.FAILED, reason=reason)
        if phase == "Running":
            if (conditions.get("Ready") or {}).get("status") == "True":
                kind = pod_labels(pod).get(builders.KIND_LABEL, "jupyter")
                url = builders.access_url(
                    session_id, kind=kind, namespace=metadata.get("namespace") or "", url_pattern=self.pod_options.url_pattern
                )
                return PollResult(PollStatus.RUNNING, access_url=url)
            return PollResult(PollStatus.PENDING, reason=Reason.of("driver.waiting_for_answer"))
        pending = self._pending_reason(pod, conditions)
        age = age_seconds(metadata.get("creationTimestamp"))
        if age is not None and age > self.spawn_timeout_seconds:
            reason = Reason.of("driver.start_timeout", seconds=f"{self.spawn_timeout_seconds:g}", cause=pending)
            return PollResult(PollStatus.FAILED, reason=reason)
        return PollResult(PollStatus.PENDING, reason=pending)

    def _pending_reason(self, pod: dict[str, Any], conditions: dict[str, Any]) -> Reason:
        scheduled = conditions.get("PodScheduled")
        if scheduled is not None and scheduled.get("status") == "False":
            message, why = scheduled.get("message"), scheduled.get("reason")
            if why == "Unschedulable":
                if message:
                    return Reason.of("driver.waiting_for_npu", detail=message)
                return Reason.of("driver.waiting_for_npu_no_room")
            if message or why:
                return Reason.of("driver.waiting_to_be_scheduled_because", detail=message or why)
            return Reason.of("driver.waiting_to_be_scheduled")
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STARTING:
                return Reason.of("driver.starting_container")
        if scheduled is not None and scheduled.get("status") == "True":
            return Reason.of("driver.starting_container")
        # No condition yet: a scheduler that gave up may have said why only in an event.
        event = self._latest_warning(pod.get("metadata") or {})
        if event is not None and event.reason == "FailedScheduling":
            return Reason.of("driver.waiting_for_npu", detail=event.message or "")
        return Reason.of("driver.waiting_to_be_scheduled")

    def _latest_warning(self, metadata: Mapping[str, Any]) -> client.CoreV1Event | None:
        uid = metadata.get("uid")
        events = self._call(
            "reading the lab pod's events",
            self.core.list_namespaced_event,
            metadata.get("namespace"),
            field_selector=f"involvedObject.uid={uid}",
        ).items
        warnings = [
            event
            for event in events
            if event.type == "Warning" and event.involved_object is not None and event.involved_object.uid == uid
        ]
        if not warnings:
            return None

        def when(event: client.CoreV1Event) -> dt.datetime:
            stamp = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
            return stamp if stamp is not None else dt.datetime.min.replace(tzinfo=dt.UTC)

        return max(warnings, key=when)

    def _stop_reason(self, pod: Mapping[str, Any], phase: str) -> Reason:
        status = pod.get("status") or {}
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated:
                return terminated_reason(terminated, pod)
        parts = [part for part in (status.get("reason"), status.get("message")) if part]
        if parts:
            return Reason.of("session.driver", message=": ".join(parts))
        return Reason.of("driver.pod_completed" if phase == "Succeeded" else "driver.pod_failed")
