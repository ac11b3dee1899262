"""ServiceAccount tokens authenticate, and RBAC gives them exactly the verbs their Role grants."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.devcluster.cluster import DevCluster
from tests.kube.conftest import api_message, pod_manifest

pytestmark = pytest.mark.kube


@pytest.fixture
def reader_token(devcluster: DevCluster, core: client.CoreV1Api, namespace: str) -> str:
    """A token of ServiceAccount ``reader``, allowed to get and list pods in ``namespace`` and nothing else."""
    rbac = client.RbacAuthorizationV1Api(devcluster.api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        namespace,
        {"metadata": {"name": "pod-reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    request = core.create_namespaced_service_account_token("reader", namespace, {"spec": {"expirationSeconds": 600}})
    return request.status.token


def test_a_service_account_token_authenticates(devcluster: DevCluster, namespace: str, reader_token: str) -> None:
    with devcluster.token_client(reader_token) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1"})
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace)

    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:reader"
    assert pods.items == []


def test_rbac_refuses_a_verb_the_role_lacks(devcluster: DevCluster, namespace: str, reader_token: str) -> None:
    with devcluster.token_client(reader_token) as api, pytest.raises(ApiException) as refused:
        client.CoreV1Api(api).create_namespaced_pod(namespace, pod_manifest("not-allowed"))

    assert refused.value.status == 403
    assert f'"system:serviceaccount:{namespace}:reader" cannot create resource "pods"' in api_message(refused.value)


def test_rbac_refuses_another_namespace(devcluster: DevCluster, namespace: str, reader_token: str) -> None:
    with devcluster.token_client(reader_token) as api, pytest.raises(ApiException) as refused:
        client.CoreV1Api(api).list_namespaced_pod("kube-system")

    assert refused.value.status == 403


def test_a_forged_token_is_unauthorized(devcluster: DevCluster, namespace: str, reader_token: str) -> None:
    header, payload, _signature = reader_token.split(".")
    with devcluster.token_client(f"{header}.{payload}.AAAA") as api, pytest.raises(ApiException) as refused:
        client.CoreV1Api(api).list_namespaced_pod(namespace)

    assert refused.value.status == 401
