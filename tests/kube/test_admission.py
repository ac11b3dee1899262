"""Admission runs for real: a ResourceQuota refuses a pod that breaks it, a LimitRange fills in and refuses."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.drivers.kubernetes.profiles import FlexNPUProfile
from tests.kube.conftest import api_message, pod_manifest, wait_for

pytestmark = pytest.mark.kube

CORE = FlexNPUProfile.CORE


def _quota(core: client.CoreV1Api, namespace: str, hard: dict[str, str]) -> None:
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "course"}, "spec": {"hard": hard}})
    # The quota controller must have computed the first usage before admission enforces the quota.
    wait_for("the quota's first usage", lambda: core.read_namespaced_resource_quota("course", namespace).status.used)


def test_a_pod_over_the_namespace_quota_is_refused(core: client.CoreV1Api, namespace: str) -> None:
    _quota(core, namespace, {f"requests.{CORE}": "50", "pods": "4"})
    core.create_namespaced_pod(namespace, pod_manifest("first", resources={CORE: "30"}))

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod_manifest("second", resources={CORE: "30"}))

    assert refused.value.status == 403
    assert (
        f'pods "second" is forbidden: exceeded quota: course, requested: requests.{CORE}=30, '
        f"used: requests.{CORE}=30, limited: requests.{CORE}=50"
    ) in api_message(refused.value)
    assert [pod.metadata.name for pod in core.list_namespaced_pod(namespace).items] == ["first"]


def test_a_quota_on_cpu_refuses_a_pod_that_sets_no_cpu(core: client.CoreV1Api, namespace: str) -> None:
    _quota(core, namespace, {"requests.cpu": "2"})

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod_manifest("no-cpu"))

    assert refused.value.status == 403
    assert "must specify requests.cpu" in api_message(refused.value)


def test_a_limit_range_sets_the_default_requests(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_limit_range(
        namespace,
        {
            "metadata": {"name": "lab-defaults"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}, "defaultRequest": {"cpu": "250m"}}]},
        },
    )

    pod = core.create_namespaced_pod(namespace, pod_manifest("defaulted"))

    assert pod.spec.containers[0].resources.requests["cpu"] == "250m"
    assert pod.spec.containers[0].resources.limits["cpu"] == "1"


def test_a_limit_range_refuses_a_container_over_its_max(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_limit_range(
        namespace, {"metadata": {"name": "lab-max"}, "spec": {"limits": [{"type": "Container", "max": {"memory": "4Gi"}}]}}
    )

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod_manifest("too-big", resources={"memory": "8Gi"}))

    assert refused.value.status == 403
    assert "maximum memory usage per Container is 4Gi, but limit is 8Gi" in api_message(refused.value)
