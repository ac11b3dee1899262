"""The controller-manager cleans up: owned objects go with their owner, a namespace with everything in it."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.devcluster.cluster import DevCluster
from tests.kube.conftest import pod_manifest, wait_for

pytestmark = pytest.mark.kube


def _gone(read) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_a_secret_owned_by_a_pod_is_deleted_after_the_pod(core: client.CoreV1Api, namespace: str) -> None:
    pod = core.create_namespaced_pod(namespace, pod_manifest("lab"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "lab", "uid": pod.metadata.uid}
    secret = {"metadata": {"name": "lab-token", "ownerReferences": [owner]}, "stringData": {"token": "x"}}
    core.create_namespaced_secret(namespace, secret)
    wait_for("the pod bound", lambda: core.read_namespaced_pod("lab", namespace).spec.node_name)

    # A delete with the default grace period: the simulated kubelet must finish it.
    core.delete_namespaced_pod("lab", namespace)

    wait_for("the pod gone", lambda: _gone(lambda: core.read_namespaced_pod("lab", namespace)))
    wait_for("the secret collected", lambda: _gone(lambda: core.read_namespaced_secret("lab-token", namespace)))


def test_a_pod_being_deleted_is_finished_by_its_kubelet(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_pod(namespace, pod_manifest("lab"))
    wait_for("the pod Running", lambda: core.read_namespaced_pod("lab", namespace).status.phase == "Running")

    core.delete_namespaced_pod("lab", namespace, grace_period_seconds=300)

    wait_for("the pod gone long before its grace period", lambda: _gone(lambda: core.read_namespaced_pod("lab", namespace)))


def test_deleting_a_namespace_deletes_its_pods_and_then_the_namespace(devcluster: DevCluster, core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "doomed"}})
    devcluster.wait_for_service_account("doomed")
    core.create_namespaced_pod("doomed", pod_manifest("lab"))
    core.create_namespaced_config_map("doomed", {"metadata": {"name": "settings"}})
    wait_for("the pod bound", lambda: core.read_namespaced_pod("lab", "doomed").spec.node_name)

    core.delete_namespace("doomed")

    wait_for("the namespace gone", lambda: _gone(lambda: core.read_namespace("doomed")), timeout=60)
