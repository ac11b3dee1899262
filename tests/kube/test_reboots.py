"""A node restart on the real control plane, the controller running in this process with the
Kubernetes driver (the portal's ServiceAccount, which may list nodes): the node's
``status.nodeInfo.bootID`` changes, its NPU resources are at 0 for a while and its lab pods show
Failed (the CCE FlexNPU guide: "节点意外重启后，NPU虚拟化Pod可能因NPU虚拟化资源上报延迟，显示为"执行失败"状态。
此为正常现象，可忽略该状态"). The session is not failed: it waits for the NPUs, then is watched
again when its pod comes back, or started again on its allocation when the pod stays Failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import portal_token
from labs.domain.reasons import Reason
from labs.drivers import get_driver
from labs.drivers.kubernetes import builders
from labs.models import Allocation, Course, Enrollment, LabSession, LabTemplate, Node
from labs.services.controller import reconcile_once
from labs.services.reboots import nodes_observe
from labs.services.sessions import session_launch, session_stop
from tests.factories import node_with_cards
from tests.kube.conftest import LabCourse, make_lab_course, portal_driver_config

pytestmark = pytest.mark.kube

WAITING = "waiting for the NPU to come back after a node restart"
RESTARTED = "the node restarted; your lab was restarted"


@pytest.fixture
def kube_course(deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any) -> Iterator[LabCourse]:
    """A FlexNPU course with one student, its node as the portal's Node, and the portal's driver."""
    course = make_lab_course(deployed, settings, profile="flexnpu", students=1)
    node_with_cards(name=course.node)
    token = portal_token(core)
    settings.LAB_DRIVER = portal_driver_config(deployed, token, namespace_prefix=course.prefix, profile=course.profile)
    get_driver.cache_clear()
    yield course
    get_driver.cache_clear()
    core.delete_namespace(course.namespace)


def _running_lab(lab_course: LabCourse) -> LabSession:
    course = Course.objects.get(code=lab_course.code)
    student = course.enrollments.get(role=Enrollment.Role.STUDENT).user
    session = session_launch(student=student, course=course, template=LabTemplate.objects.get(slug=f"small-{course.code}"))
    _rounds_until(session, lambda s: s.state in ("running", "failed"))
    assert session.state == "running"
    nodes_observe()  # the reconciler's beat: the node's boot id is known before it restarts
    assert Node.objects.get(name=lab_course.node).boot_id
    return session


def _rounds_until(session: LabSession, done, *, timeout: float = 30.0) -> list[tuple[str, str]]:
    """Controller rounds until ``done(session)``; the (state, reason) pairs the session went through."""
    deadline = time.monotonic() + timeout
    seen: list[tuple[str, str]] = []
    while True:
        reconcile_once()
        session.refresh_from_db()
        if not seen or seen[-1] != (session.state, session.reason):
            seen.append((session.state, session.reason))
        if done(session):
            return seen
        assert time.monotonic() < deadline, seen
        time.sleep(0.1)


def _pod(core: client.CoreV1Api, course: LabCourse, session: LabSession) -> client.V1Pod:
    return core.read_namespaced_pod(builders.pod_name(str(session.pk)), course.namespace)


def test_a_lab_whose_node_restarted_waits_for_the_npus_and_is_watched_again_when_its_pod_comes_back(
    deployed: DevCluster, core: client.CoreV1Api, kube_course: LabCourse
) -> None:
    session = _running_lab(kube_course)
    allocation = Allocation.objects.get(session=session)

    deployed.simulator.reboot_node(kube_course.node, devices_after_seconds=3.0, pods_come_back=True)
    seen = _rounds_until(session, lambda s: s.reason == RESTARTED or s.state != "running")

    assert ("running", WAITING) in seen and not any(state != "running" for state, _ in seen), seen
    assert (session.state, session.reason, session.restarts) == ("running", RESTARTED, 1)
    assert _pod(core, kube_course, session).metadata.uid == session.driver_ref  # the same pod, watched again
    node = Node.objects.get(name=kube_course.node)
    assert node.boot_id == deployed.simulator.boot_id(kube_course.node)
    assert node.rebooted_at is not None and node.devices_back_at > node.rebooted_at
    assert Allocation.objects.get(session=session) == allocation and allocation.released_at is None


def test_a_lab_whose_pod_stays_failed_after_a_node_restart_is_started_again_on_its_allocation(
    deployed: DevCluster, core: client.CoreV1Api, kube_course: LabCourse
) -> None:
    session = _running_lab(kube_course)
    old_uid = session.driver_ref
    allocation = Allocation.objects.get(session=session)

    deployed.simulator.reboot_node(kube_course.node, devices_after_seconds=2.0, pods_come_back=False)
    seen = _rounds_until(session, lambda s: (s.state == "running" and s.driver_ref != old_uid) or s.state == "failed")

    assert ("running", WAITING) in seen and ("starting", "the node restarted; starting your lab again") in seen, seen
    assert (session.state, session.reason) == ("running", RESTARTED)
    pod = _pod(core, kube_course, session)
    assert pod.metadata.uid == session.driver_ref != old_uid and pod.status.phase == "Running"
    kept = Allocation.objects.get(session=session)
    assert (kept.pk, kept.card_id, kept.released_at) == (allocation.pk, allocation.card_id, None)
    assert kept.entity_id == pod.metadata.uid

    assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="ada"))
    _rounds_until(session, lambda s: s.state == "stopped")
    assert Allocation.objects.filter(session=session, released_at__isnull=False).count() == 1
