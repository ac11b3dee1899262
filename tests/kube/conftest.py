"""The real control plane (``labs.devcluster``) as a session fixture, with one fake node per device profile.

The binaries come from ``make controlplane``; without them every test here fails and says so
(deselect them with ``-m "not kube"``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.devcluster.binaries import ControlPlaneNotBuilt, require_built
from labs.devcluster.cluster import DevCluster, processes_using
from labs.devcluster.nodes import fake_nodes
from labs.devcluster.portal import apply_course_manifests, deploy_portal, portal_driver_options
from labs.drivers.base import CardBinding, LaunchSpec
from labs.drivers.kubernetes.builders import namespace_name
from tests.factories import course_with_students

START_DELAY_SECONDS = 0.5


@pytest.fixture(scope="session")
def devcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    try:
        require_built()
    except ControlPlaneNotBuilt as exc:
        pytest.fail(str(exc), pytrace=False)
    directory = tmp_path_factory.mktemp("devcluster")
    with DevCluster(directory, nodes=fake_nodes(3), start_delay_seconds=START_DELAY_SECONDS) as cluster:
        yield cluster
        assert cluster.simulator.errors == []
        pids = cluster.pids()
    # The teardown is tested here, on the cluster every test used: nothing of it may be left.
    left = list(processes_using(directory))
    assert not left, f"processes left after the cluster stopped: {left}"
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids.values())
    assert not cluster.simulator.alive
    assert not directory.exists()


@pytest.fixture(scope="session")
def core(devcluster: DevCluster) -> client.CoreV1Api:
    return client.CoreV1Api(devcluster.api)


@pytest.fixture
def namespace(devcluster: DevCluster, core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    devcluster.wait_for_service_account(name)
    yield name
    core.delete_namespace(name)


def api_message(exc: ApiException) -> str:
    """The message of the API server's Status in a refused request."""
    return json.loads(exc.body)["message"]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """``probe()``'s first truthy value, polled until ``timeout``; else fail saying ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {value!r})")


def pod_manifest(name: str, *, resources: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A one-container pod for the volcano scheduler profile; ``resources`` are requests == limits."""
    container: dict[str, Any] = {"name": "lab", "image": "registry.example.edu/jupyterlab:4"}
    if resources:
        container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"schedulerName": "volcano", "restartPolicy": "Never", "containers": [container], **spec},
    }


# -- deploy/ applied for real, and the portal's driver with the ServiceAccount deploy/ makes ----


@pytest.fixture(scope="session")
def deployed(devcluster: DevCluster) -> DevCluster:
    """``deploy/base`` applied to the session cluster (after the namespace Volcano's installation would make)."""
    deploy_portal(devcluster)
    return devcluster


def portal_driver_config(devcluster: DevCluster, token: str, **options: Any) -> dict[str, Any]:
    """The Kubernetes driver's settings as the portal's (``LAB_K8S_*``), aimed at the cluster with ``token``."""
    return {
        "BACKEND": "labs.drivers.kubernetes.KubernetesDriver",
        "OPTIONS": portal_driver_options(devcluster, token, retries=1, **options),
    }


@dataclass(frozen=True)
class LabCourse:
    """A course whose namespace ``course_manifests`` made: its code, namespace prefix, namespace, device profile and node."""

    code: str
    prefix: str
    namespace: str
    profile: str
    node: str


PROFILES = ("flexnpu", "vnpu", "hami")
COURSE_QUOTA = {"core_percent": 400, "memory_mib": 65536, "instance_count": 16}


def make_lab_course(
    devcluster: DevCluster,
    settings: Any,
    *,
    profile: str,
    code: str = "NPU101",
    quota: dict[str, int] | None = None,
    students: int = 0,
) -> LabCourse:
    """The course in the database (``quota``, ``students`` enrolled students), its namespace applied
    from ``course_manifests`` under a fresh prefix."""
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    settings.LAB_DRIVER = {**settings.LAB_DRIVER, "OPTIONS": {**settings.LAB_DRIVER["OPTIONS"], "namespace_prefix": prefix}}
    course_with_students(students, quota=quota or COURSE_QUOTA, code=code)
    apply_course_manifests(devcluster, code, profile=profile)
    node = next(node.name for node in devcluster.nodes if node.profile == profile)
    namespace = namespace_name(code, namespace_prefix=prefix)
    devcluster.wait_for_service_account(namespace)
    return LabCourse(code, prefix, namespace, profile, node)


@pytest.fixture(params=PROFILES)
def lab_course(
    request: pytest.FixtureRequest, deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> Iterator[LabCourse]:
    """A course namespace per test and device profile, as a cluster admin makes it; deleted after the test."""
    course = make_lab_course(deployed, settings, profile=request.param)
    yield course
    core.delete_namespace(course.namespace)


def lab_spec(
    course: LabCourse,
    *,
    session_id: str | None = None,
    core_percent: int = 25,
    memory_mib: int = 8192,
    scenario: str = "training",
    **fields: Any,
) -> LaunchSpec:
    """A launch spec of ``course`` on its profile's node; ``fields`` are other ``LaunchSpec`` fields."""
    card = CardBinding(
        node=course.node,
        card_index=0,
        die_id="",
        chip_type="910B",
        core_percent=core_percent,
        memory_mib=memory_mib,
        scenario=scenario,
        card_memory_mib=65536,
    )
    values: dict[str, Any] = {"kind": "jupyter", "image": "registry.example.edu/jupyterlab:4", **fields}
    return LaunchSpec(
        session_id=session_id or str(uuid.uuid4()),
        secret=f"tok-{uuid.uuid4().hex}",
        card=card,
        course_code=course.code,
        student="ada",
        **values,
    )
