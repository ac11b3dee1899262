"""A template on two whole cards, launched through the portal onto the real control plane: its
pod (FlexNPU ``volcano.sh/flexnpu-num: 2`` with 200 % core and both cards' memory; vNPU
``huawei.com/vnpu-number: 2``; HAMi two devices) is accepted by the API server within the course
namespace's quota, and Volcano schedules it on the node that has them."""

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
from labs.drivers.kubernetes.profiles import FlexNPUProfile
from labs.models import Allocation, Course, Enrollment, LabSession
from labs.services.controller import reconcile_once
from labs.services.sessions import session_launch
from tests.factories import CARD_MIB, TemplateFactory, node_with_cards
from tests.kube.conftest import LabCourse, make_lab_course, portal_driver_config, wait_for

pytestmark = pytest.mark.kube

QUOTA = {"core_percent": 400, "memory_mib": 4 * CARD_MIB, "instance_count": 16}
HOST_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
# What each profile's pod asks of the NPU device plugin for two whole 64 GiB cards.
TWO_CARDS = {
    "flexnpu": {FlexNPUProfile.NUM: "2", FlexNPUProfile.CORE: "200", FlexNPUProfile.MEMORY: str(2 * CARD_MIB // 128)},
    "vnpu": {"huawei.com/vnpu-number": "2"},
    "hami": {"huawei.com/Ascend910B3": "2"},
}


@pytest.fixture(params=sorted(TWO_CARDS))
def kube_course(
    request: pytest.FixtureRequest, deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> Iterator[LabCourse]:
    """A course of each device profile with one student and room for two whole cards, its node
    as the portal's Node (8 cards of 64 GiB, as the fake node), and the portal's Kubernetes driver."""
    course = make_lab_course(deployed, settings, profile=request.param, students=1, quota=QUOTA)
    node_with_cards(name=course.node, cards=8, memory_mib=CARD_MIB)
    token = portal_token(core)
    settings.LAB_DRIVER = portal_driver_config(deployed, token, namespace_prefix=course.prefix, profile=course.profile)
    get_driver.cache_clear()
    yield course
    get_driver.cache_clear()
    core.delete_namespace(course.namespace)


def test_a_two_card_lab_is_accepted_and_scheduled_on_the_node_with_the_cards(
    deployed: DevCluster, core: client.CoreV1Api, kube_course: LabCourse
) -> None:
    course = Course.objects.get(code=kube_course.code)
    pair = TemplateFactory(institution=course.institution, name="pair", core_percent=100, memory_mib=CARD_MIB, card_count=2)
    course.templates.add(pair)
    student = course.enrollments.get(role=Enrollment.Role.STUDENT).user
    session = session_launch(student=student, course=course, template=pair)

    deadline = time.monotonic() + 60
    while session.state not in ("running", "failed"):
        assert time.monotonic() < deadline, (session.state, session.reason)
        reconcile_once()
        session.refresh_from_db()
        time.sleep(0.1)

    assert (session.state, session.reason) == ("running", "")
    assert Allocation.objects.get(session=session).cards == 2
    pod = core.read_namespaced_pod(builders.pod_name(str(session.pk)), kube_course.namespace)
    [container] = pod.spec.containers
    npu = {name: value for name, value in container.resources.limits.items() if name not in HOST_RESOURCES}
    assert npu == TWO_CARDS[kube_course.profile]
    assert {name: container.resources.requests[name] for name in npu} == npu
    assert pod.spec.node_name == kube_course.node
    node = core.read_node(pod.spec.node_name)
    assert all(int(node.status.allocatable[name]) >= int(value) for name, value in npu.items())
    scheduled = wait_for(
        "the Scheduled event",
        lambda: core.list_namespaced_event(kube_course.namespace, field_selector="reason=Scheduled").items,
    )
    assert [event.reporting_component for event in scheduled] == ["volcano"]
    assert LabSession.objects.get(pk=session.pk).allocation.more_cards.count() == 1


@pytest.mark.parametrize("profile", sorted(TWO_CARDS))
def test_a_course_at_its_instance_count_with_a_two_card_lab_is_not_refused_by_the_namespace_quota(
    profile: str, deployed: DevCluster, core: client.CoreV1Api, db: None, settings: Any
) -> None:
    """The portal counts a lab on two whole cards as one instance; the device plugin's count
    resource (``flexnpu-num``, ``vnpu-number``, the HAMi device) as two. The namespace's quota
    must let in what the course's quota does: a two-card lab and a share, two instances."""
    quota = {"core_percent": 205, "memory_mib": 2 * CARD_MIB + 4096, "instance_count": 2}
    course = make_lab_course(deployed, settings, profile=profile, students=2, quota=quota)
    node_with_cards(name=course.node, cards=8, memory_mib=CARD_MIB)
    settings.LAB_DRIVER = portal_driver_config(deployed, portal_token(core), namespace_prefix=course.prefix, profile=profile)
    get_driver.cache_clear()
    try:
        row = Course.objects.get(code=course.code)
        pair = TemplateFactory(institution=row.institution, name="pair", core_percent=100, memory_mib=CARD_MIB, card_count=2)
        share = TemplateFactory(institution=row.institution, name="share", core_percent=5, memory_mib=4096)
        row.templates.add(pair, share)
        first, second = (enrollment.user for enrollment in row.enrollments.filter(role=Enrollment.Role.STUDENT))
        sessions = [
            session_launch(student=first, course=row, template=pair),
            session_launch(student=second, course=row, template=share),
        ]

        deadline = time.monotonic() + 60
        while any(s.state not in ("running", "failed") for s in sessions):
            assert time.monotonic() < deadline, [(s.state, s.reason) for s in sessions]
            reconcile_once()
            for s in sessions:
                s.refresh_from_db()
            time.sleep(0.1)

        assert [(s.state, s.reason) for s in sessions] == [("running", ""), ("running", "")]
    finally:
        get_driver.cache_clear()
        core.delete_namespace(course.namespace)
