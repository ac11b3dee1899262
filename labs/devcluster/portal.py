"""The portal on a dev cluster, as deploy/README.md installs it: shared by tests/kube and the benches.

``deploy_portal`` applies ``deploy/base`` (server-side, as the admin); ``portal_token`` asks the
TokenRequest API for a token of the ServiceAccount it makes, so the portal's requests meet the
shipped RBAC; ``apply_course_manifests`` applies what ``manage.py course_manifests`` prints for a
course (needs Django set up); ``lab_objects_left`` lists what the API server still holds of the
portal's labs in a namespace.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

from kubernetes import client

from labs.devcluster.cluster import ClusterError, DevCluster
from labs.drivers.kubernetes import builders

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PORTAL_NAMESPACE = "npu-lab-portal"
PORTAL_SERVICE_ACCOUNT = "npu-lab-portal"
# Volcano's own installation makes this namespace; deploy/base only puts the scheduler's
# ConfigMap into it. No CRD is needed: deploy/ uses no Volcano kind (no Queue, no PodGroup).
VOLCANO_NAMESPACE = "volcano-system"


def apply_kustomization(cluster: DevCluster, directory: Path) -> subprocess.CompletedProcess[str]:
    """``kubectl apply --server-side -k directory`` as the admin; the result, checked by the caller."""
    return cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(directory), check=False)


def deploy_portal(cluster: DevCluster) -> None:
    """``deploy/base`` applied (after the namespace Volcano's installation would make)."""
    client.CoreV1Api(cluster.api).create_namespace({"metadata": {"name": VOLCANO_NAMESPACE}})
    applied = apply_kustomization(cluster, DEPLOY / "base")
    if applied.returncode != 0:
        raise ClusterError(f"kubectl apply -k deploy/base failed:\n{applied.stderr}")


def portal_token(core: client.CoreV1Api, seconds: int = 3600) -> str:
    """A token of the portal's ServiceAccount as deploy/base makes it (the TokenRequest API)."""
    request = core.create_namespaced_service_account_token(
        PORTAL_SERVICE_ACCOUNT, PORTAL_NAMESPACE, {"spec": {"expirationSeconds": seconds}}
    )
    return request.status.token


def portal_driver_options(cluster: DevCluster, token: str, **options: Any) -> dict[str, Any]:
    """The Kubernetes driver's options (``LAB_DRIVER_OPTIONS``), aimed at ``cluster`` with ``token``."""
    base = {"api_url": cluster.server, "token": token, "ca_cert": str(cluster.ca_file), "request_timeout_seconds": 10}
    return {**base, **options}


def apply_course_manifests(cluster: DevCluster, code: str, *, profile: str) -> None:
    """``manage.py course_manifests <code> | kubectl apply -f -``, as deploy/README.md says to add a course."""
    from django.core.management import call_command

    out = io.StringIO()
    call_command("course_manifests", code, "--profile", profile, stdout=out)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=out.getvalue())


def lab_objects_left(api: client.ApiClient, namespace: str) -> dict[str, list[str]]:
    """The portal's lab objects the API server still holds in ``namespace``, by kind; kinds with none left out."""
    core = client.CoreV1Api(api)
    networking = client.NetworkingV1Api(api)
    lists = {
        "pods": core.list_namespaced_pod,
        "secrets": core.list_namespaced_secret,
        "services": core.list_namespaced_service,
        "ingresses": networking.list_namespaced_ingress,
    }
    label = builders.SESSION_LABEL
    left = {kind: [o.metadata.name for o in list_(namespace, label_selector=label).items] for kind, list_ in lists.items()}
    return {kind: names for kind, names in left.items() if names}
