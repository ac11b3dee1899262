"""Pure builders of a course namespace's objects: the namespace, its default-deny NetworkPolicy,
the portal's RoleBinding and the ResourceQuota; no API calls.

Like ``builders`` (a lab session's objects): plain values in, the JSON the API server receives out.
"""

from __future__ import annotations

from dataclasses import dataclass

from labs.drivers.kubernetes.builders import COURSE_LABEL, LABEL_PREFIX, MANAGED_BY, label_value, namespace_name
from labs.drivers.kubernetes.profiles import DeviceProfile


def make_namespace(course_code: str, *, namespace_prefix: str = "lab-") -> dict:
    """The course's namespace; Pod Security ``restricted`` matches what ``make_pod`` builds."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace_name(course_code, namespace_prefix=namespace_prefix),
            "labels": {
                **MANAGED_BY,
                COURSE_LABEL: label_value(course_code or "default"),
                "pod-security.kubernetes.io/enforce": "restricted",
            },
            "annotations": {f"{LABEL_PREFIX}/course-code": course_code},
        },
    }


def make_network_policy(
    course_code: str,
    *,
    namespace_prefix: str = "lab-",
    portal_namespace: str = "npu-lab-portal",
    ingress_namespace: str = "ingress-nginx",
    ingress_pod_labels: dict[str, str] | None = None,
) -> dict:
    """Default deny for the course namespace: lab pods take traffic only from the portal and the ingress controller.

    No rule admits pods of the same namespace, so students' pods cannot reach one another.
    """
    ingress_pods = ingress_pod_labels or {"app.kubernetes.io/name": "ingress-nginx"}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "lab-sessions-default-deny",
            "namespace": namespace_name(course_code, namespace_prefix=namespace_prefix),
            "labels": dict(MANAGED_BY),
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": portal_namespace}}}]},
                {
                    "from": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ingress_namespace}},
                            "podSelector": {"matchLabels": dict(ingress_pods)},
                        }
                    ]
                },
            ],
        },
    }


PORTAL_SERVICE_ACCOUNT = "npu-lab-portal"
LAB_DRIVER_CLUSTER_ROLE = "npu-lab-portal-lab-driver"


def make_role_binding(course_code: str, *, namespace_prefix: str = "lab-", portal_namespace: str = "npu-lab-portal") -> dict:
    """Grants the portal's ServiceAccount the ClusterRole of deploy/base/rbac.yaml in the course namespace only.

    Without it the portal may not create a single pod there: it holds no namespaced rights anywhere else.
    """
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": LAB_DRIVER_CLUSTER_ROLE,
            "namespace": namespace_name(course_code, namespace_prefix=namespace_prefix),
            "labels": dict(MANAGED_BY),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LAB_DRIVER_CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": PORTAL_SERVICE_ACCOUNT, "namespace": portal_namespace}],
    }


@dataclass(frozen=True)
class CourseQuota:
    """A course's nominal (guaranteed) share and how much more it may borrow; integers, units in the names."""

    guarantee_core_percent: int
    guarantee_memory_mib: int
    guarantee_instances: int
    borrow_core_percent: int = 0
    borrow_memory_mib: int = 0
    borrow_instances: int = 0


def make_resource_quota(course_code: str, quota: CourseQuota, *, profile: DeviceProfile, namespace_prefix: str = "lab-") -> dict:
    """The hard ceiling of a course namespace: its guarantee plus its borrowing limit, in device resources.

    Kubernetes quotas have no notion of a guarantee; the guarantee itself is kept by the
    portal's ledger (and a Volcano queue's ``guarantee``), and recorded here in annotations.
    """
    amounts = (
        quota.guarantee_core_percent,
        quota.guarantee_memory_mib,
        quota.guarantee_instances,
        quota.borrow_core_percent,
        quota.borrow_memory_mib,
        quota.borrow_instances,
    )
    if any(amount < 0 for amount in amounts):
        raise ValueError(f"quota amounts must be >= 0, got {quota}")
    hard = profile.quota(
        core_percent=quota.guarantee_core_percent + quota.borrow_core_percent,
        memory_mib=quota.guarantee_memory_mib + quota.borrow_memory_mib,
        instances=quota.guarantee_instances + quota.borrow_instances,
    )
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "lab-sessions",
            "namespace": namespace_name(course_code, namespace_prefix=namespace_prefix),
            "labels": dict(MANAGED_BY),
            "annotations": {
                f"{LABEL_PREFIX}/guarantee-core-percent": str(quota.guarantee_core_percent),
                f"{LABEL_PREFIX}/guarantee-memory-mib": str(quota.guarantee_memory_mib),
                f"{LABEL_PREFIX}/guarantee-instances": str(quota.guarantee_instances),
                f"{LABEL_PREFIX}/borrow-core-percent": str(quota.borrow_core_percent),
                f"{LABEL_PREFIX}/borrow-memory-mib": str(quota.borrow_memory_mib),
                f"{LABEL_PREFIX}/borrow-instances": str(quota.borrow_instances),
            },
        },
        "spec": {"hard": hard},
    }
