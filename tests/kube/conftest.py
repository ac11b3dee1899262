"""The real control plane (``labs.devcluster``) as a session fixture, with one fake node per device profile.

The binaries come from ``make controlplane``; without them every test here fails and says so
(deselect them with ``-m "not kube"``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.devcluster.binaries import ControlPlaneNotBuilt, require_built
from labs.devcluster.cluster import DevCluster, processes_using
from labs.devcluster.nodes import fake_nodes

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
