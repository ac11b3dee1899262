"""The portal's driver on the real control plane: garbage collection, quota, scheduling and node failures."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import portal_token
from labs.domain.reasons import Reason
from labs.drivers import DriverRefused, PollStatus, build_driver
from labs.drivers.kubernetes import KubernetesDriver, builders
from tests.drivers.helpers import wait_for as wait_for_status
from tests.kube.conftest import LabCourse, lab_spec, make_lab_course, portal_driver_config, wait_for

pytestmark = pytest.mark.kube

HOST = "labs.example.edu"


def portal_driver(devcluster: DevCluster, core: client.CoreV1Api, course: LabCourse, **options: Any) -> KubernetesDriver:
    config = portal_driver_config(
        devcluster, portal_token(core), namespace_prefix=course.prefix, profile=course.profile, ingress_host=HOST, **options
    )
    return build_driver(config)


def _exists(read: Any, name: str, namespace: str) -> bool:
    try:
        read(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_the_garbage_collector_deletes_the_secret_service_and_ingress_with_the_pod(
    deployed: DevCluster, core: client.CoreV1Api, lab_course: LabCourse
) -> None:
    driver = portal_driver(deployed, core, lab_course)
    spec = lab_spec(lab_course)
    driver.create(spec)
    assert wait_for_status(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED).status == PollStatus.RUNNING
    networking = client.NetworkingV1Api(deployed.api)
    parts = [
        (core.read_namespaced_secret, builders.secret_name(spec.session_id)),
        (core.read_namespaced_service, builders.service_name(spec.session_id)),
        (networking.read_namespaced_ingress, builders.ingress_name(spec.session_id)),
    ]
    assert all(_exists(read, name, lab_course.namespace) for read, name in parts)

    # Only the pod, as a node drain or an admin would: its parts must follow by their owner reference.
    core.delete_namespaced_pod(builders.pod_name(spec.session_id), lab_course.namespace)

    wait_for(
        "the garbage collector to delete the secret, service and ingress",
        lambda: not any(_exists(read, name, lab_course.namespace) for read, name in parts),
    )
    assert driver.poll(spec.session_id).status == PollStatus.GONE


def test_a_lab_over_the_course_quota_is_refused_with_the_api_servers_reason(
    deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> None:
    quota = {"core_percent": 20, "memory_mib": 65536, "instance_count": 4}
    course = make_lab_course(deployed, settings, profile="flexnpu", quota=quota)
    try:
        driver = portal_driver(deployed, core, course)

        with pytest.raises(DriverRefused) as refused:
            driver.create(lab_spec(course, core_percent=25))

        assert "403 Forbidden" in str(refused.value)
        assert "exceeded quota: lab-sessions, requested: requests.volcano.sh/flexnpu-core.percentage=25" in str(refused.value)
        assert driver.observe() == {}
    finally:
        core.delete_namespace(course.namespace)


def test_a_repeated_create_of_a_lab_that_fills_the_quota_finds_its_pod_instead_of_a_refusal(
    deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> None:
    """A create whose answer came too late is asked again; the quota, full with its own pod, answers 403 first."""
    quota = {"core_percent": 25, "memory_mib": 8192, "instance_count": 1}
    course = make_lab_course(deployed, settings, profile="flexnpu", quota=quota)
    try:
        driver = portal_driver(deployed, core, course)
        spec = lab_spec(course, core_percent=25, memory_mib=8192)
        uid = driver.create(spec)

        assert driver.create(spec) == uid
        with pytest.raises(DriverRefused, match="exceeded quota"):  # another lab is still refused
            driver.create(lab_spec(course, core_percent=25, memory_mib=8192))
        assert set(driver.observe()) == {spec.session_id}
    finally:
        core.delete_namespace(course.namespace)


def test_a_create_asked_again_looks_first_and_is_not_charged_to_the_quota_again(
    deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> None:
    """Every create is charged to the namespace's ResourceQuota at admission, before the name is
    checked: a lab's create sent twice would keep the class's last student out ("exceeded
    quota") until the quota controller recounts. One asked again (its lease ended) reads first."""
    quota = {"core_percent": 50, "memory_mib": 16384, "instance_count": 2}
    course = make_lab_course(deployed, settings, profile="flexnpu", quota=quota)
    try:
        driver = portal_driver(deployed, core, course)
        first = lab_spec(course, core_percent=25, memory_mib=8192)
        uid = driver.create(first)

        assert driver.create(replace(first, repeat=True)) == uid
        assert driver.create(replace(first, repeat=True)) == uid
        used = core.read_namespaced_resource_quota("lab-sessions", course.namespace).status.used
        assert used["pods"] == "1"
        second = lab_spec(course, core_percent=25, memory_mib=8192)
        assert driver.create(second)  # the class's last place is still there
        assert set(driver.observe()) == {first.session_id, second.session_id}
    finally:
        core.delete_namespace(course.namespace)


def test_a_lab_no_node_can_hold_waits_with_the_schedulers_reason(
    deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> None:
    course = make_lab_course(deployed, settings, profile="flexnpu")
    try:
        driver = portal_driver(deployed, core, course)
        vnpu_node = next(node.name for node in deployed.nodes if node.profile == "vnpu")
        spec = lab_spec(course)
        # A FlexNPU share on a node whose device plugin advertises no FlexNPU resources.
        driver.create(replace(spec, card=replace(spec.card, node=vnpu_node)))

        result = wait_for(
            "the scheduler's reason", lambda: (r := driver.poll(spec.session_id)).reason.code == "driver.waiting_for_npu" and r
        )

        assert result.status == PollStatus.PENDING
        assert "Insufficient volcano.sh/flexnpu-num" in dict(result.reason.params)["detail"]
        events = core.list_namespaced_event(course.namespace, field_selector="reason=FailedScheduling").items
        assert events and events[0].message in dict(result.reason.params)["detail"]
    finally:
        core.delete_namespace(course.namespace)


def test_a_lab_on_a_lost_node_is_no_longer_reported_running_and_is_evicted_saying_why(
    deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> None:
    course = make_lab_course(deployed, settings, profile="hami")
    driver = portal_driver(deployed, core, course, pod_options={"node_lost_seconds": 2})
    spec = lab_spec(course)
    driver.create(spec)
    assert wait_for_status(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED).status == PollStatus.RUNNING

    deployed.simulator.lose_node(course.node)
    try:
        # The node lifecycle controller marks the node's pods not Ready once it misses its lease.
        seen = wait_for(
            "the session not running",
            lambda: (o := driver.observe()[spec.session_id]).status != PollStatus.RUNNING and o,
            timeout=deployed.node_monitor_grace_seconds + 20,
        )
        assert seen.status == PollStatus.PENDING
        assert seen.node == course.node
        assert seen.reason.code == "driver.waiting_for_answer"
        # Past the lab's toleration the taint-eviction controller takes it away, and the driver
        # says why (the lifecycle fails the session with it: tests/domain/test_lifecycle.py).
        evicted = wait_for(
            "the lab evicted from the lost node",
            lambda: (o := driver.observe()[spec.session_id]).deleting and o,
            timeout=30,
        )
        assert evicted.status == PollStatus.FAILED
        assert evicted.reason == Reason.of("driver.node_lost", node=course.node)
    finally:
        deployed.simulator.restore_node(course.node)
        deployed.wait_for_nodes_ready()
        core.delete_namespace(course.namespace)


def test_a_labs_secret_is_immutable_on_the_api_server(
    deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> None:
    """No kubelet keeps a watch on an immutable secret, and nobody swaps a running lab's token."""
    course = make_lab_course(deployed, settings, profile="flexnpu")
    try:
        driver = portal_driver(deployed, core, course)
        spec = lab_spec(course)
        driver.create(spec)
        name = builders.secret_name(spec.session_id)

        assert core.read_namespaced_secret(name, course.namespace).immutable is True
        with pytest.raises(ApiException) as refused:
            core.patch_namespaced_secret(name, course.namespace, {"stringData": {builders.SECRET_KEY: "swapped"}})
        assert refused.value.status == 422
        assert "field is immutable when `immutable` is set" in str(refused.value.body)
    finally:
        core.delete_namespace(course.namespace)
