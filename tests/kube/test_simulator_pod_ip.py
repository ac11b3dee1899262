"""A simulator given one ``pod_ip`` reports it for every pod, so one stub server answers for them all (bench.jupyterhub)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.nodes import FakeNode
from labs.devcluster.simulator import NodeSimulator
from tests.kube.conftest import pod_manifest, wait_for

pytestmark = pytest.mark.kube


@pytest.fixture
def stub_node(devcluster: DevCluster, core: client.CoreV1Api) -> Iterator[tuple[FakeNode, NodeSimulator]]:
    """A node of its own on the session cluster, whose kubelet gives every pod 127.0.0.1; removed after the test."""
    node = FakeNode(name=f"stub-{uuid.uuid4().hex[:8]}")
    api = devcluster.api_client(devcluster.kubeconfig)
    simulator = NodeSimulator(api, [node], start_delay_seconds=0, pod_ip="127.0.0.1")
    simulator.start()
    try:
        yield node, simulator
    finally:
        simulator.stop(timeout=15)  # its pod watch ends with the watch's own 10 s timeout
        core.delete_node(node.name)
        api.close()
    assert simulator.errors == []
    assert not simulator.alive


def test_every_pod_reports_the_one_pod_ip_it_was_given(
    stub_node: tuple[FakeNode, NodeSimulator], core: client.CoreV1Api, namespace: str
) -> None:
    node, _simulator = stub_node
    for name in ("lab-1", "lab-2"):
        core.create_namespaced_pod(namespace, pod_manifest(name, nodeName=node.name))

    pods = [
        wait_for(f"{name} Running", lambda n=name: (p := core.read_namespaced_pod(n, namespace)).status.phase == "Running" and p)
        for name in ("lab-1", "lab-2")
    ]

    assert [pod.status.pod_ip for pod in pods] == ["127.0.0.1", "127.0.0.1"]
    assert [[entry.ip for entry in pod.status.pod_ips] for pod in pods] == [["127.0.0.1"], ["127.0.0.1"]]


@pytest.mark.parametrize("pod_ip", ["localhost", "10.64.0.300", ""])
def test_a_pod_ip_that_is_not_an_address_is_refused_before_anything_starts(tmp_path, pod_ip: str) -> None:
    with pytest.raises(ValueError, match="pod_ip must be an IP address"):
        DevCluster(tmp_path / "cluster", pod_ip=pod_ip)
    assert not (tmp_path / "cluster").exists()
