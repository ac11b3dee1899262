"""Host CPU and memory counted per node (issue 14), through the real launch path: the launch view,
the allocation pass on PostgreSQL, the session page in both languages."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import translation

from labs.domain.states import SessionState
from labs.models import Allocation, LabSession, LabTemplate, Node
from labs.selectors.capacity import capacity_snapshot
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch

GIB = 1024


def host(world, *, memory_mib: int | None, cpu_millicores: int | None = 192_000) -> Node:
    node = world["node"]
    Node.objects.filter(pk=node.pk).update(host_cpu_millicores=cpu_millicores, host_memory_mib=memory_mib)
    return node


def ask(template: LabTemplate, *, memory_mib: int, cpu_millicores: int = 500) -> LabTemplate:
    LabTemplate.objects.filter(pk=template.pk).update(
        host_memory_request_mib=memory_mib,
        host_memory_limit_mib=memory_mib,
        cpu_request_millicores=cpu_millicores,
        cpu_limit_millicores=cpu_millicores,
    )
    template.refresh_from_db()
    return template


def launch_over_http(student, world, template) -> str:
    client = Client()
    client.force_login(student)
    response = client.post(
        "/sessions/launch/", {"course": world["course"].pk, "template": template.pk}, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 201, response.content
    return response.json()["session"]["id"]


def test_the_snapshot_offers_a_node_its_reported_host_minus_the_reserve(world, settings):
    settings.LAB_NODE_RESERVE_CPU_MILLICORES = 2000
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 12 * GIB
    host(world, memory_mib=1024 * GIB, cpu_millicores=192_000)

    (node,) = capacity_snapshot()

    assert (node.cpu_millicores, node.host_memory_mib) == (190_000, 1012 * GIB)


def test_a_node_without_host_figures_is_not_limited(world):
    host(world, memory_mib=None, cpu_millicores=None)
    ask(world["small"], memory_mib=64 * GIB, cpu_millicores=64_000)

    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()

    assert LabSession.objects.get(pk=session.pk).state == SessionState.ADMITTED


def test_a_launch_that_would_overcommit_the_nodes_memory_waits_and_says_why(world, settings):
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 12 * GIB
    node = host(world, memory_mib=(12 + 14) * GIB)  # 14 GiB for lab sessions
    template = ask(world["small"], memory_mib=8 * GIB)
    first = launch_over_http(world["students"][0], world, template)
    allocation_pass()
    second = launch_over_http(world["students"][1], world, template)

    allocation_pass()

    assert LabSession.objects.get(pk=first).state == SessionState.ADMITTED
    waiting = LabSession.objects.get(pk=second)
    assert waiting.state == SessionState.QUEUED
    assert waiting.reason == f"node memory: needs 8 GiB; the most free is 6 GiB on {node.name}"
    assert Allocation.objects.filter(released_at__isnull=True).count() == 1
    # The student's page says it, in the student's language too.
    client = Client()
    client.force_login(world["students"][1])
    english = client.get(f"/sessions/{second}/", HTTP_ACCEPT="application/json").json()["session"]
    assert "node memory: needs 8 GiB; the most free is 6 GiB" in english["reason"]
    with translation.override("zh-hans"):
        chinese = client.get(f"/sessions/{second}/", HTTP_ACCEPT="application/json", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "需要 8 GiB" in chinese.json()["session"]["reason"]
    assert "node memory" not in chinese.json()["session"]["reason"]


def test_a_launch_no_node_could_ever_hold_is_refused_with_the_largest_node(world, settings):
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 12 * GIB
    host(world, memory_mib=(12 + 6) * GIB)
    template = ask(world["small"], memory_mib=8 * GIB)
    session = launch_over_http(world["students"][0], world, template)

    allocation_pass()

    refused = LabSession.objects.get(pk=session)
    assert refused.state == SessionState.FAILED
    assert refused.reason == "node memory: needs 8 GiB; the largest node has 6 GiB for lab sessions"


def test_cpu_is_counted_like_memory(world, settings):
    settings.LAB_NODE_RESERVE_CPU_MILLICORES = 2000
    node = host(world, memory_mib=1024 * GIB, cpu_millicores=5000)  # 3 CPUs for lab sessions
    template = ask(world["small"], memory_mib=GIB, cpu_millicores=2000)
    session_launch(student=world["students"][0], course=world["course"], template=template)
    allocation_pass()
    second = session_launch(student=world["students"][1], course=world["course"], template=template)

    allocation_pass()

    assert LabSession.objects.get(pk=second.pk).reason == (
        f"node CPU: needs 2 cores; the most free is 1 core on {node.name}"
    )


def test_the_allocation_records_the_host_request_and_a_release_gives_it_back(world, settings):
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 0
    host(world, memory_mib=8 * GIB)
    template = ask(world["small"], memory_mib=8 * GIB)
    first = session_launch(student=world["students"][0], course=world["course"], template=template)
    allocation_pass()
    assert Allocation.objects.get(session=first).host_memory_mib == 8 * GIB
    from labs.domain.reasons import Reason
    from labs.services.sessions import session_stop

    session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="tester"))
    Allocation.objects.filter(session=first).update(released_at=first.created_at)
    second = session_launch(student=world["students"][1], course=world["course"], template=template)

    allocation_pass()

    assert LabSession.objects.get(pk=second.pk).state == SessionState.ADMITTED


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cpu_limit_millicores", 100, "must be at least the request"),
        ("host_memory_limit_mib", 1024, "must be at least the request"),
        ("host_memory_request_mib", 64 * GIB, "No node can give 64 GiB of memory; the largest has"),
    ],
)
def test_a_template_with_a_limit_below_its_request_or_beyond_every_node_is_invalid(world, settings, field, value, message):
    settings.LAB_NODE_RESERVE_MEMORY_MIB = 12 * GIB
    host(world, memory_mib=(12 + 32) * GIB)
    template = world["small"]
    setattr(template, field, value)

    with pytest.raises(ValidationError, match=message):
        template.full_clean()


def test_a_course_host_memory_cap_queues_a_launch_beyond_it_and_refuses_one_larger_than_it(world):
    template = ask(world["small"], memory_mib=4 * GIB)
    world["course"].quota.host_memory_cap_mib = 6 * GIB
    world["course"].quota.save(update_fields=["host_memory_cap_mib"])
    first = session_launch(student=world["students"][0], course=world["course"], template=template)
    allocation_pass()
    second = session_launch(student=world["students"][1], course=world["course"], template=template)

    allocation_pass()

    assert LabSession.objects.get(pk=first.pk).state == SessionState.ADMITTED
    assert LabSession.objects.get(pk=second.pk).reason == (
        "course quota: host memory: 4 GiB of 6 GiB in use; needs 4 GiB more"
    )
    world["course"].quota.host_memory_cap_mib = 2 * GIB
    world["course"].quota.save(update_fields=["host_memory_cap_mib"])
    allocation_pass()
    refused = LabSession.objects.get(pk=second.pk)
    assert (refused.state, refused.reason) == (
        SessionState.FAILED,
        "course quota: needs 4 GiB of host memory; the course can hold at most 2 GiB",
    )
