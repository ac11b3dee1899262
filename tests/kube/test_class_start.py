"""A class of 128 starts and stops through the portal on the real control plane.

Daphne and a Celery worker run the Kubernetes driver against the session's cluster with the
token of the ServiceAccount deploy/ makes; one 8-card FlexNPU node holds the class (16 small
labs of 5 % / 4 GiB a card). 128 students log in and press Launch over HTTP at once, and every
tenth pod restarts once as it starts, as the CCE FlexNPU guide says pods may when many instances
are created at once ("属正常现象": normal); every lab runs, every student stops theirs, every
allocation is released once, and the API server keeps nothing of the course's labs: no pod,
secret, service or ingress. Then a lab pod no session owns is made behind the portal's back, and
the controller deletes it (the orphan path).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db.models import Count
from kubernetes import client

from bench.classstart.portal import PASSWORD, login_cookies_http
from bench.harness import fire_at_once, http_request
from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import lab_objects_left, portal_token
from labs.dispatch import controller_wake
from labs.domain.states import SessionState
from labs.drivers import build_driver
from labs.drivers.kubernetes import builders
from labs.models import Allocation, Course, Enrollment, LabSession, LabTemplate, UsageRecord
from tests.factories import node_with_cards
from tests.kube.conftest import LabCourse, lab_spec, make_lab_course, portal_driver_config, wait_for

pytestmark = [pytest.mark.kube, pytest.mark.slow]

CLASS = 128
HOST = "labs.example.edu"
QUOTA = {"core_percent": 5 * CLASS, "memory_mib": 4096 * CLASS, "instance_count": CLASS}
THREADS = 16
# From the first launch to the last lab running, over the node simulator's 0.5 s start
# (tests/kube/conftest.py); a generous bound for a shared 2-core machine: the test prints the time.
RUNNING_WITHIN_SECONDS = 60
# The share of the class's pods the node simulator restarts once as they start (exactly: every tenth).
RESTART_FRACTION = 0.1


@pytest.fixture
def lab_class(deployed: DevCluster, core: client.CoreV1Api, transactional_db: None, settings: Any) -> Iterator[LabCourse]:
    """The class's course and namespace, and the flexnpu node as the portal's Node with its 8 cards."""
    course = make_lab_course(deployed, settings, profile="flexnpu", code="CLASS128", quota=QUOTA, students=CLASS)
    node_with_cards(name=course.node)  # the allocation pass's node is the Kubernetes node the driver pins to
    yield course
    core.delete_namespace(course.namespace)


@pytest.fixture
def batch_restarts(deployed: DevCluster) -> Iterator[int]:
    """Every tenth pod that starts restarts once; how many of the class's will."""
    deployed.simulator.restart_fraction = RESTART_FRACTION
    yield int(CLASS * RESTART_FRACTION)
    deployed.simulator.restart_fraction = 0.0


@pytest.fixture
def portal_server_env(deployed: DevCluster, core: client.CoreV1Api, lab_class: LabCourse) -> dict[str, str]:
    """Daphne's and the worker's driver: Kubernetes, with the portal's ServiceAccount token."""
    options = {
        "api_url": deployed.server,
        "token": portal_token(core),
        "ca_cert": str(deployed.ca_file),
        "namespace_prefix": lab_class.prefix,
        "profile": lab_class.profile,
        "ingress_host": HOST,
        "request_timeout_seconds": 10,
    }
    return {"LAB_DRIVER": "labs.drivers.kubernetes.KubernetesDriver", "LAB_DRIVER_OPTIONS": json.dumps(options)}


def _by_state(course_code: str) -> dict[str, int]:
    rows = LabSession.objects.filter(course__code=course_code).values_list("state").annotate(n=Count("id")).order_by()
    return dict(rows)


def _wait_until_all(course_code: str, state: SessionState, *, timeout: float) -> None:
    """Until all ``CLASS`` sessions of the course are in ``state``; else fail with the count by state."""
    deadline = time.monotonic() + timeout
    while (by_state := _by_state(course_code)) != {state: CLASS}:
        if time.monotonic() > deadline:
            pytest.fail(f"not every lab {state} after {timeout:.0f} s: {by_state}")
        time.sleep(0.2)


def _wait_until_nothing_left(deployed: DevCluster, namespace: str, *, timeout: float) -> None:
    """Until the API server holds no lab object in ``namespace``; else fail naming how many of each kind are left."""
    deadline = time.monotonic() + timeout
    while left := lab_objects_left(deployed.api, namespace):
        if time.monotonic() > deadline:
            pytest.fail(f"left in {namespace} after {timeout:.0f} s: " + ", ".join(f"{len(v)} {k}" for k, v in left.items()))
        time.sleep(0.2)


def test_a_class_of_128_with_batch_restarts_starts_and_stops_on_one_node_leaving_nothing_in_the_api_server(
    deployed: DevCluster,
    lab_class: LabCourse,
    portal_server: str,
    portal_server_env: dict[str, str],
    start_worker,
    batch_restarts: int,
) -> None:
    worker = start_worker(concurrency=4, **portal_server_env)
    wait_for("the worker to be ready", lambda: " ready." in worker.output(), timeout=60)
    course = Course.objects.get(code=lab_class.code)
    enrolled = Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).values_list("user_id", flat=True)
    students = get_user_model().objects.filter(pk__in=enrolled)
    students.update(password=make_password(PASSWORD))
    cookies = login_cookies_http(portal_server, list(students), THREADS)
    template = LabTemplate.objects.get(slug=f"small-{course.code}")
    body = urlencode({"course": course.pk, "template": template.pk})

    def post(path: str, user_pk: int, data: str = ""):
        cookie, csrf = cookies[user_pk]
        headers = {
            "Cookie": cookie,
            "X-CSRFToken": csrf,
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        return lambda: http_request("POST", f"{portal_server}{path}", headers=headers, body=data)

    started = time.time()
    launched = fire_at_once([(str(s.pk), post("/sessions/launch/", s.pk, body)) for s in students], threads=THREADS)
    assert [f.status for f in launched] == [201] * CLASS, [(f.status, f.error) for f in launched if f.status != 201]

    _wait_until_all(lab_class.code, SessionState.RUNNING, timeout=RUNNING_WITHIN_SECONDS)
    last_running = max(LabSession.objects.filter(course__code=lab_class.code).values_list("running_at", flat=True))
    print(
        f"\n{CLASS} labs on the real control plane: time from the first launch to all running "
        f"{last_running.timestamp() - started:.1f} s"
    )
    pods = client.CoreV1Api(deployed.api).list_namespaced_pod(lab_class.namespace, label_selector=builders.SESSION_LABEL)
    assert len(pods.items) == CLASS
    assert {p.spec.node_name for p in pods.items} == {lab_class.node}
    assert all(p.status.phase == "Running" for p in pods.items)
    # The restarted labs run too, and their sessions recorded the restart as they came up.
    assert sorted(p.status.container_statuses[0].restart_count for p in pods.items).count(1) == batch_restarts
    restarts = LabSession.objects.filter(course__code=lab_class.code).values_list("restarts", flat=True)
    assert sorted(restarts) == [0] * (CLASS - batch_restarts) + [1] * batch_restarts

    sessions = dict(LabSession.objects.filter(course__code=lab_class.code).values_list("student_id", "pk"))
    stopped = fire_at_once([(str(pk), post(f"/sessions/{sessions[pk]}/stop/", pk)) for pk in sessions], threads=THREADS)
    assert [f.status for f in stopped] == [200] * CLASS, [(f.status, f.error) for f in stopped if f.status != 200]

    stopping = time.time()
    _wait_until_all(lab_class.code, SessionState.STOPPED, timeout=60)
    last_stopped = max(LabSession.objects.filter(course__code=lab_class.code).values_list("ended_at", flat=True))
    print(f"time from the first stop to all stopped {last_stopped.timestamp() - stopping:.1f} s")
    allocations = Allocation.objects.filter(session__course__code=lab_class.code)
    assert allocations.count() == CLASS and not allocations.filter(released_at__isnull=True).exists()
    records = UsageRecord.objects.filter(allocation__in=allocations).values("allocation").annotate(n=Count("id"))
    assert sorted(r["n"] for r in records) == [1] * CLASS  # each release recorded exactly once
    _wait_until_nothing_left(deployed, lab_class.namespace, timeout=30)
    print(f"class started and stopped in {time.time() - started:.1f} s")

    # The reconciler's orphan path: a lab pod the portal has no session for is deleted.
    orphan = lab_spec(lab_class)
    build_driver(
        portal_driver_config(
            deployed, portal_token(client.CoreV1Api(deployed.api)), namespace_prefix=lab_class.prefix, profile=lab_class.profile
        )
    ).create(orphan)
    assert lab_objects_left(deployed.api, lab_class.namespace)["pods"] == [builders.pod_name(orphan.session_id)]
    controller_wake()
    _wait_until_nothing_left(deployed, lab_class.namespace, timeout=30)
