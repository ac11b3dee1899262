"""Lab restarts on the real control plane, the controller running in this process with the
Kubernetes driver: a FlexNPU lab that restarts once while starting ends running (the CCE FlexNPU
guide: normal when many instances are created at once), and a running lab killed for memory
comes back and its session says so."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import portal_token
from labs.drivers import get_driver
from labs.drivers.kubernetes import builders
from labs.models import Course, Enrollment, LabSession, LabTemplate
from labs.services.controller import reconcile_once
from labs.services.sessions import session_launch
from tests.factories import node_with_cards
from tests.kube.conftest import LabCourse, make_lab_course, portal_driver_config

pytestmark = pytest.mark.kube


@pytest.fixture
def kube_course(deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any) -> Iterator[LabCourse]:
    """A FlexNPU course with one student, its node as the portal's Node, and the portal's driver
    (``get_driver()``) the Kubernetes one with the ServiceAccount deploy/ makes."""
    course = make_lab_course(deployed, settings, profile="flexnpu", students=1)
    node_with_cards(name=course.node)
    token = portal_token(core)
    settings.LAB_DRIVER = portal_driver_config(deployed, token, namespace_prefix=course.prefix, profile=course.profile)
    get_driver.cache_clear()
    yield course
    get_driver.cache_clear()
    core.delete_namespace(course.namespace)


def _launch(lab_course: LabCourse) -> LabSession:
    course = Course.objects.get(code=lab_course.code)
    student = course.enrollments.get(role=Enrollment.Role.STUDENT).user
    return session_launch(student=student, course=course, template=LabTemplate.objects.get(slug=f"small-{course.code}"))


def _rounds_until(session: LabSession, done, *, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        reconcile_once()
        session.refresh_from_db()
        if done(session):
            return
        assert time.monotonic() < deadline, (session.state, session.reason)
        time.sleep(0.1)


def _container(core: client.CoreV1Api, course: LabCourse, session: LabSession) -> client.V1ContainerStatus:
    return core.read_namespaced_pod(builders.pod_name(str(session.pk)), course.namespace).status.container_statuses[0]


def test_a_lab_that_restarts_once_while_starting_ends_running(
    deployed: DevCluster, core: client.CoreV1Api, kube_course: LabCourse
) -> None:
    session = _launch(kube_course)
    deployed.simulator.fail_pod(kube_course.namespace, builders.pod_name(str(session.pk)), "RestartOnce")

    _rounds_until(session, lambda s: s.state in ("running", "failed"))

    assert (session.state, session.reason) == ("running", "")
    assert session.restarts == 1  # recorded as it came up: not reported as a running lab's restart
    container = _container(core, kube_course, session)
    assert (container.restart_count, container.last_state.terminated.reason) == (1, "Error")


def test_a_running_lab_killed_for_memory_comes_back_and_its_session_says_so(
    deployed: DevCluster, core: client.CoreV1Api, kube_course: LabCourse
) -> None:
    session = _launch(kube_course)
    _rounds_until(session, lambda s: s.state in ("running", "failed"))
    assert (session.state, session.restarts) == ("running", 0)

    deployed.simulator.fail_pod(kube_course.namespace, builders.pod_name(str(session.pk)), "OOMKilledOnce")
    _rounds_until(session, lambda s: s.restarts or s.state != "running")

    said = "the lab restarted after OOMKilled, exit code 137 (restart 1)"
    assert (session.state, session.restarts, session.reason) == ("running", 1, said)
    _rounds_until(session, lambda s: _container(core, kube_course, s).ready)  # back up
    assert (session.state, session.restarts, session.reason) == ("running", 1, said)
