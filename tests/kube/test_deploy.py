"""deploy/ applied to the real API server, and the portal's driver working with the RBAC deploy/ ships.

Every kustomization is applied with ``kubectl apply --server-side``; the portal then talks to the
API server with a token of the ServiceAccount deploy/base makes, in a course namespace that
``manage.py course_manifests`` made, so a verb missing from deploy/base/rbac.yaml fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import DEPLOY, PORTAL_NAMESPACE, apply_kustomization, portal_token
from labs.drivers import PollStatus, build_driver
from labs.drivers.kubernetes import namespaces
from tests.drivers.helpers import wait_for as wait_for_status
from tests.kube.conftest import LabCourse, api_message, lab_spec, make_lab_course, portal_driver_config, wait_for

pytestmark = pytest.mark.kube

KUSTOMIZATIONS = sorted(
    path.parent.relative_to(DEPLOY).as_posix()
    for path in DEPLOY.rglob("kustomization.yaml")
    if yaml.safe_load(path.read_text()).get("kind") != "Component"  # a component is applied within an overlay
)


def test_every_kustomization_is_found() -> None:
    assert {"base", "course", "overlays/example", "overlays/in-cluster-postgresql"} <= set(KUSTOMIZATIONS)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_the_api_server_accepts_the_kustomization(deployed: DevCluster, kustomization: str) -> None:
    directory = DEPLOY / kustomization
    rendered = list(yaml.safe_load_all(deployed.kubectl("kustomize", str(directory)).stdout))

    applied = apply_kustomization(deployed, directory)

    assert applied.returncode == 0, applied.stderr
    assert len(applied.stdout.splitlines()) == len(rendered), applied.stdout


def test_the_portals_workloads_pass_the_namespaces_pod_security_and_run(deployed: DevCluster) -> None:
    apps = client.AppsV1Api(deployed.api)

    def unavailable() -> list[str]:
        deployments = apps.list_namespaced_deployment(PORTAL_NAMESPACE).items
        return [d.metadata.name for d in deployments if (d.status.available_replicas or 0) < d.spec.replicas]

    # Generous: on a busy 2-core machine the deployment controller, the scheduler and the node
    # simulator share it with the test run (a CI run once needed more than 30 s).
    try:
        wait_for("every Deployment of npu-lab-portal available", lambda: not unavailable() or None, timeout=90)
    except pytest.fail.Exception:
        pytest.fail(f"Deployments not available: {unavailable()}\n{_rollout_state(deployed)}")
    agents = apps.read_namespaced_daemon_set("node-agent", "npu-lab-agent")
    wait_for(
        "the node agent on every NPU node",
        lambda: apps.read_namespaced_daemon_set("node-agent", "npu-lab-agent").status.number_ready == len(deployed.nodes),
    )
    assert agents.status.desired_number_scheduled == len(deployed.nodes)


def _rollout_state(cluster: DevCluster) -> str:
    """What the API server says of the portal's Deployments, ReplicaSets and pods (for a failure's message)."""
    lines = []
    for kind in ("deployments", "replicasets", "pods"):
        listed = cluster.kubectl("get", kind, "-n", PORTAL_NAMESPACE, "-o", "wide", check=False)
        lines.append(listed.stdout + listed.stderr)
    nodes = cluster.kubectl("get", "nodes", "-o", "wide", check=False)
    lines.append(nodes.stdout + nodes.stderr)
    lines.append(f"node simulator: reconciled {cluster.simulator.reconciled}, errors {cluster.simulator.errors[-10:]}")
    described = cluster.kubectl("describe", "deployments", "-n", PORTAL_NAMESPACE, check=False)
    events = cluster.kubectl("get", "events", "-n", PORTAL_NAMESPACE, "--sort-by=.lastTimestamp", check=False)
    ended = [f"{c.name} ended ({c.process.returncode}):\n{c.tail()}" for c in cluster.components if c.process.poll() is not None]
    controllers = next(c for c in cluster.components if c.name == "kube-controller-manager")
    return "\n".join([*lines, described.stdout, events.stdout[-6000:], *ended, controllers.tail(40)])


@pytest.fixture
def flexnpu_course(deployed: DevCluster, db: None, settings: Any, core: client.CoreV1Api) -> Any:
    course = make_lab_course(deployed, settings, profile="flexnpu")
    yield course
    core.delete_namespace(course.namespace)


def _portal_driver(devcluster: DevCluster, core: client.CoreV1Api, course: LabCourse, **options: Any) -> Any:
    return build_driver(
        portal_driver_config(devcluster, portal_token(core), namespace_prefix=course.prefix, profile=course.profile, **options)
    )


def test_the_portals_service_account_runs_a_lab_in_a_course_namespace(
    deployed: DevCluster, core: client.CoreV1Api, flexnpu_course: LabCourse
) -> None:
    driver = _portal_driver(deployed, core, flexnpu_course, ingress_host="labs.example.edu")
    spec = lab_spec(flexnpu_course)

    driver.create(spec)
    result = wait_for_status(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED, timeout=30)

    assert result.status == PollStatus.RUNNING, result.reason
    assert result.access_url == f"https://labs.example.edu/labs/{spec.session_id}/"
    assert driver.observe()[spec.session_id].node == flexnpu_course.node
    driver.delete(spec.session_id)
    wait_for_status(driver, spec.session_id, PollStatus.GONE, timeout=30)


def test_the_course_manifests_grant_the_portal_nothing_outside_its_namespace(
    deployed: DevCluster, core: client.CoreV1Api, flexnpu_course: LabCourse, namespace: str
) -> None:
    driver = _portal_driver(deployed, core, flexnpu_course)
    pod = {"metadata": {"name": "not-allowed"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}

    with pytest.raises(ApiException) as refused:
        driver.core.create_namespaced_pod(namespace, pod)

    assert refused.value.status == 403
    assert f'cannot create resource "pods" in API group "" in the namespace "{namespace}"' in api_message(refused.value)


def test_the_namespace_is_what_the_driver_expects(
    deployed: DevCluster, core: client.CoreV1Api, flexnpu_course: LabCourse
) -> None:
    made = core.read_namespace(flexnpu_course.namespace)
    quota = core.read_namespaced_resource_quota("lab-sessions", flexnpu_course.namespace)
    binding = client.RbacAuthorizationV1Api(deployed.api).read_namespaced_role_binding(
        namespaces.LAB_DRIVER_CLUSTER_ROLE, flexnpu_course.namespace
    )

    assert made.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # 16 instances, and one more per 100 % of core (a lab on whole cards counts one per card).
    assert (quota.spec.hard["pods"], quota.spec.hard["requests.volcano.sh/flexnpu-num"]) == ("16", "20")
    assert [(s.name, s.namespace) for s in binding.subjects] == [("npu-lab-portal", PORTAL_NAMESPACE)]
