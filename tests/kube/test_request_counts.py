"""The API server counts the portal's own requests (``DevCluster.request_counts``, its audit log),
apart from every other client's, and its metric counts everyone's (``metric_request_counts``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import PORTAL_NAMESPACE, PORTAL_SERVICE_ACCOUNT, portal_token
from labs.drivers import build_driver
from tests.kube.conftest import LabCourse, lab_spec, make_lab_course, pod_manifest, portal_driver_config

pytestmark = pytest.mark.kube

PORTAL_USER = f"system:serviceaccount:{PORTAL_NAMESPACE}:{PORTAL_SERVICE_ACCOUNT}"


@pytest.fixture
def course(deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any) -> Iterator[LabCourse]:
    course = make_lab_course(deployed, settings, profile="flexnpu")
    yield course
    core.delete_namespace(course.namespace)


def test_a_driver_create_counts_as_the_portals_four_requests_and_nobody_elses(
    deployed: DevCluster, core: client.CoreV1Api, course: LabCourse, namespace: str
) -> None:
    driver = build_driver(
        portal_driver_config(
            deployed, portal_token(core), namespace_prefix=course.prefix, profile=course.profile, ingress_host="labs.example.edu"
        )
    )
    other = f"system:serviceaccount:{namespace}:default"
    other_token = core.create_namespaced_service_account_token("default", namespace, {"spec": {"expirationSeconds": 600}})
    portal_before, other_before = deployed.request_counts(PORTAL_USER), deployed.request_counts(other)

    driver.create(lab_spec(course))
    # Another ServiceAccount's request (RBAC refuses it, the API server still received it) and the admin's.
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(deployed.token_client(other_token.status.token)).list_namespaced_pod(course.namespace)
    assert refused.value.status == 403
    core.list_namespaced_pod(course.namespace)

    assert deployed.request_counts(PORTAL_USER) - portal_before == Counter(
        {
            ("create", "pods"): 1,  # its answer names the pod's UID: no read-back
            ("create", "secrets"): 1,
            ("create", "services"): 1,
            ("create", "ingresses"): 1,
        }
    )
    assert deployed.request_counts(other) - other_before == Counter({("list", "pods"): 1})


def test_the_metric_counts_every_clients_requests_the_audit_only_the_portals(
    deployed: DevCluster, core: client.CoreV1Api, namespace: str
) -> None:
    portal_before = deployed.request_counts(PORTAL_USER)
    every_before = deployed.metric_request_counts()

    for name in ("first", "second"):
        core.create_namespaced_pod(namespace, pod_manifest(name))

    every = deployed.metric_request_counts() - every_before
    assert every[("create", "pods")] >= 2  # the admin's two, and any other client's meanwhile
    assert deployed.request_counts(PORTAL_USER) == portal_before
