"""A lab pod's JSON read into what the controller needs: why it waits, ended or restarted."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubernetes.utils import parse_quantity

from labs.domain import vllm
from labs.domain.reasons import Reason

IMAGE_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Not CrashLoopBackOff: that is a container waiting to be restarted, which the controller judges
# (``Observed.restarts``), as it does a terminated container that its pod's restart policy restarts.
START_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
STARTING = frozenset({"ContainerCreating", "PodInitializing"})
DETAIL_MAX_CHARS = 300  # of a terminated container's message, in the reason it ended for


def positive_quantity(value: object) -> bool:
    """Whether a Kubernetes quantity (``"800"``, ``"1k"``) is above 0; ``False`` for none or nonsense."""
    if value is None:
        return False
    try:
        return parse_quantity(value) > 0
    except (ValueError, TypeError):
        return False


def pod_labels(pod: Mapping[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def terminated_reason(terminated: Mapping[str, Any], pod: Mapping[str, Any]) -> Reason:
    """Why the container of ``pod`` ended, e.g. "OOMKilled, exit code 137": its reason and message in
    Kubernetes's words, or a vendor error its log names (``labs.domain.vllm``)."""
    exit_code = terminated.get("exitCode")
    if isinstance(exit_code, bool) or not isinstance(exit_code, int | str):
        exit_code = "?"
    if terminated.get("reason"):
        reason = Reason.of("driver.container_exit", reason=str(terminated["reason"]), exit_code=exit_code)
    else:
        reason = Reason.of("driver.container_exit_code", exit_code=exit_code)
    message = str(terminated.get("message") or "")
    if not message:
        return reason
    # A vLLM container's message is its log's tail (``terminationMessagePolicy: FallbackToLogsOnError``):
    # a known vendor error is said with the vendor's advice, anything else by its last line.
    vendor = vllm.log_reason(message, cause=reason, args=_container_args(pod))
    if vendor is not None:
        return vendor
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return Reason.of("driver.with_detail", reason=reason, detail=lines[-1][:DETAIL_MAX_CHARS]) if lines else reason


def _container_args(pod: Mapping[str, Any]) -> list[str]:
    """The command line of the pod's (only) container: its command and arguments."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return [str(part) for part in (containers[0].get("command") or []) + (containers[0].get("args") or [])]


def restarted_after(terminated: Mapping[str, Any], policy: str) -> bool:
    """Whether the kubelet starts a container that ended so again, under the pod's ``restartPolicy``."""
    return policy == "Always" or (policy == "OnFailure" and terminated.get("exitCode") != 0)


def pod_restarts(pod: Mapping[str, Any]) -> tuple[int, Reason | None]:
    """How many times the pod's containers ended and were, or are about to be, started again, and
    why the last one ended (``Observed.restarts``, ``Observed.last_exit``).

    ``restartCount`` counts the restarts the kubelet made. A container that ended and waits for
    its restart counts once more: still ``terminated``, or ``waiting`` with the end as its
    ``lastState`` (CrashLoopBackOff), since the kubelet counts a restart only once it makes it.
    """
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    restarts, last_exit = 0, None
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        count = container.get("restartCount")
        restarts += count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0
        state = container.get("state") or {}
        previous = (container.get("lastState") or {}).get("terminated")
        ended = state.get("terminated")
        if ended and restarted_after(ended, policy):
            restarts += 1
            previous = ended
        elif previous and state.get("waiting"):
            restarts += 1
        if previous:
            last_exit = terminated_reason(previous, pod)
    return restarts, last_exit


def whole_quantity(value: object) -> int:
    """An extended resource's amount (``"800"``, ``"1k"``) as a whole number; 0 when absent or not a quantity."""
    try:
        return max(0, int(parse_quantity(value))) if value is not None else 0
    except (ValueError, TypeError):
        return 0


def age_seconds(created: str | None) -> float | None:
    """Seconds since an API timestamp (RFC 3339, e.g. ``2026-12-02T04:10:00Z``); ``None`` without one."""
    if not created:
        return None
    try:
        moment = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return (dt.datetime.now(dt.UTC) - moment).total_seconds()
