"""One node's agent hangs (SIGSTOP: the host stops answering, connections wait): a real worker with
beat keeps starting and stopping labs on the other node at its usual pace, and the hung node's
leftovers are cleared once its agent answers again."""

from __future__ import annotations

import pytest

from labs.domain.reasons import Reason
from labs.models import Allocation, LabSession, Node, RepairEvent
from labs.services.operations import node_drain, node_undrain
from labs.services.sessions import session_launch, session_stop
from tests.conftest import wait_for
from tests.factories import course_with_students, node_with_cards
from tests.reconcile.conftest import TOKEN

LATENCY_SECONDS = 2.0
STOP = Reason.of("session.stopped_by", who="student")


def states(sessions) -> set[str]:
    return set(LabSession.objects.filter(pk__in=[s.pk for s in sessions]).values_list("state", flat=True))


def launch_all(course, template, students) -> list[LabSession]:
    return [session_launch(student=student, course=course, template=template) for student in students]


def latencies(sessions, since: str, until: str) -> list[float]:
    rows = LabSession.objects.filter(pk__in=[s.pk for s in sessions]).values_list(since, until)
    return sorted(round((end - begin).total_seconds(), 2) for begin, end in rows)


@pytest.mark.slow
def test_a_hung_agent_delays_no_start_or_stop_on_the_other_node(start_worker, agent_process):
    healthy_node, hung_node = node_with_cards("healthy"), node_with_cards("hung")
    healthy, hung = agent_process("healthy"), agent_process("hung")
    for node, agent in ((healthy_node, healthy), (hung_node, hung)):
        node.agent_url = agent.url
        node.save(update_fields=["agent_url"])
    course, (template, _), students, instructor = course_with_students(21)
    worker = start_worker(concurrency=4, beat=True, LAB_AGENT_TOKEN=TOKEN, LAB_SIMULATOR_DELAY_SECONDS="0.2")
    log = lambda: worker.output()[-4000:]  # noqa: E731

    # Six labs on the one node, seven on the other (the other drained meanwhile), so that new labs
    # go to the healthy node (binpack); every one registered with its agent.
    node_drain(node=healthy_node, by=instructor, reason="test: place on the other node")
    on_hung = launch_all(course, template, students[:6])
    wait_for(lambda: states(on_hung) == {"running"}, timeout=60, message=log)
    node_undrain(node=healthy_node, by=instructor)
    node_drain(node=hung_node, by=instructor, reason="test: place on the other node")
    on_healthy = launch_all(course, template, students[6:13])
    wait_for(lambda: states(on_healthy) == {"running"}, timeout=60, message=log)
    node_undrain(node=hung_node, by=instructor)
    refs = {s.pk: LabSession.objects.get(pk=s.pk).driver_ref for s in on_hung + on_healthy}
    wait_for(lambda: hung.entity_ids() == {refs[s.pk] for s in on_hung}, timeout=10, message="registered on hung")
    wait_for(lambda: healthy.entity_ids() == {refs[s.pk] for s in on_healthy}, timeout=10, message="registered on healthy")

    hung.pause()
    try:
        # The hung node's students stop their labs, and at the same time the healthy node's
        # students stop and launch: the controller's calls to the hung agent must not hold them.
        for session in on_hung + on_healthy[:3]:
            session_stop(session_id=session.pk, reason=STOP)
        first_wave = launch_all(course, template, students[13:17])
        wait_for(
            lambda: states(on_healthy[:3]) == {"stopped"} and states(first_wave) == {"running"},
            timeout=15,
            message=lambda: f"the healthy node's first wave; worker log:\n{log()}",
        )
        # The call that was not answered marked the node unavailable: no more calls go to it.
        wait_for(lambda: not Node.objects.get(pk=hung_node.pk).available, timeout=10, message="the hung node unavailable")
        for session in on_healthy[3:]:
            session_stop(session_id=session.pk, reason=STOP)
        second_wave = launch_all(course, template, students[17:21])
        wait_for(
            lambda: states(on_healthy[3:]) == {"stopped"} and states(second_wave) == {"running"},
            timeout=15,
            message=lambda: f"the healthy node's second wave; worker log:\n{log()}",
        )
        # The hung node's own stops end too: its instances are gone, whatever its agent does.
        wait_for(lambda: states(on_hung) == {"stopped"}, timeout=15, message=lambda: f"the hung node's stops; {log()}")
        stop_times = latencies(on_healthy, "stopping_at", "ended_at")
        start_times = latencies(first_wave + second_wave, "created_at", "running_at")
        placed = set(Allocation.objects.filter(session__in=first_wave + second_wave).values_list("card__node__name", flat=True))
    finally:
        hung.resume()

    assert stop_times[-1] <= LATENCY_SECONDS, f"stops on the healthy node took {stop_times} s"
    assert start_times[-1] <= LATENCY_SECONDS, f"starts on the healthy node took {start_times} s"
    assert placed == {"healthy"}
    # Back, the node answers its quick check and its agent forgets the ended labs at once (not at
    # the residual sweep minutes later).
    wait_for(lambda: Node.objects.get(pk=hung_node.pk).available, timeout=10, message="the hung node available")
    wait_for(lambda: hung.entity_ids() == set(), timeout=10, message=lambda: f"the hung node cleared; {log()}")
    events = list(RepairEvent.objects.filter(node=hung_node).order_by("id").values_list("kind", flat=True))
    assert [kind for kind in events if kind.startswith("node_")] == ["node_unavailable", "node_available"], events
    live = {LabSession.objects.get(pk=s.pk).driver_ref for s in first_wave + second_wave}
    wait_for(lambda: healthy.entity_ids() == live, timeout=10, message="the healthy node lists exactly its live labs")
