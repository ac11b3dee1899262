"""The reconciler with injected faults: after one reconcile nothing is leaked and nothing live was touched."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.models import Allocation, Card, LabSession, Node, RepairEvent, ResidualCandidate
from labs.services.allocation import allocation_pass
from labs.services.controller import reconcile_once
from labs.services.reconcile import reconcile
from labs.services.sessions import session_launch, session_stop


def running_session(world, student_index=0):
    session = session_launch(student=world["students"][student_index], course=world["course"], template=world["small"])
    for _ in range(100):
        reconcile_once()
        session.refresh_from_db()
        if session.state == "running":
            break
        time.sleep(0.05)
    assert session.state == "running"
    return session


def kinds():
    return list(RepairEvent.objects.order_by("id").values_list("kind", flat=True))


def test_a_healthy_cluster_reconciles_to_nothing(world, agent, cluster_driver):
    session = running_session(world)
    assert {i.entity_id for i in agent.driver.instances()} == {session.driver_ref}
    report = reconcile()
    assert (report.rebound, report.sessions_failed, report.residuals_seen, report.residuals_unregistered) == (0, 0, 0, 0)
    session.refresh_from_db()
    assert session.state == "running"
    assert kinds() == []


def test_stopping_a_session_unregisters_its_instance(world, agent, cluster_driver):
    session = running_session(world)
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student000"))
    reconcile_once()
    reconcile_once()
    session.refresh_from_db()
    assert session.state == "stopped"
    assert agent.driver.instances() == []


def test_an_instance_the_node_reports_on_another_card_moves_its_allocation_there(world, agent, cluster_driver):
    session = running_session(world)
    allocation = Allocation.objects.select_related("card").get(session=session)
    other_card = (allocation.card.index + 3) % 8
    # The device plugin, not the portal, chose the card: the node reports the instance elsewhere.
    agent.driver.unregister(session.driver_ref)
    agent.driver.register(entity_id=session.driver_ref, card_index=other_card, core_percent=5, memory_mib=4096)

    report = reconcile()

    assert report.rebound == 1
    allocation.refresh_from_db()
    assert allocation.card.index == other_card and allocation.released_at is None
    event = RepairEvent.objects.get(kind="card_rebound")
    assert event.session_id == session.pk and f"NPU {other_card}" in event.message
    assert reconcile().rebound == 0  # the ledger agrees now


def test_a_residual_instance_is_unregistered_only_after_the_grace_window(world, agent, cluster_driver, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    live = running_session(world)
    residual = str(uuid.uuid4())  # a force-deleted pod left this behind
    agent.driver.register(entity_id=residual, card_index=3, core_percent=10, memory_mib=8192)

    first = reconcile()
    assert first.residuals_seen == 1 and first.residuals_unregistered == 0
    assert {i.entity_id for i in agent.driver.instances()} == {live.driver_ref, residual}

    ResidualCandidate.objects.update(first_seen_at=timezone.now() - timedelta(seconds=301))
    second = reconcile()
    assert second.residuals_unregistered == 1
    assert {i.entity_id for i in agent.driver.instances()} == {live.driver_ref}
    live.refresh_from_db()
    assert live.state == "running"
    assert kinds() == ["residual_seen", "residual_unregistered"]


def test_a_fresh_idle_instance_of_a_live_session_is_never_taken_for_a_residual(world, agent, cluster_driver, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 0
    session = running_session(world)  # never touched the NPU: AI Core use 0
    assert all(i.aicore_percent == 0 for i in agent.driver.instances())
    reconcile()
    reconcile()
    assert {i.entity_id for i in agent.driver.instances()} == {session.driver_ref}


def test_an_agent_that_lost_a_registration_gets_it_again_and_the_lab_lives_on(world, agent, cluster_driver):
    session = running_session(world)
    agent.driver.unregister(session.driver_ref)  # the agent restarted and forgot it

    report = reconcile()

    session.refresh_from_db()
    assert session.state == "running"
    assert report.reregistered == 1 and report.sessions_failed == 0
    assert {i.entity_id for i in agent.driver.instances()} == {session.driver_ref}


def test_the_instance_of_an_ended_session_is_unregistered_without_waiting_for_the_grace(world, agent, cluster_driver, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    live = running_session(world)
    ended = running_session(world, 1)
    # Its stop finished (the instance's pod is gone) while the agent did not answer, so the
    # registration stayed behind.
    cluster_driver.delete(str(ended.pk))
    LabSession.objects.filter(pk=ended.pk).update(state="stopped", ended_at=timezone.now())
    Allocation.objects.filter(session=ended).update(released_at=timezone.now())

    report = reconcile()

    assert report.residuals_unregistered == 1
    assert {i.entity_id for i in agent.driver.instances()} == {live.driver_ref}
    assert kinds() == ["residual_unregistered"]


def test_a_stop_that_comes_while_the_instance_is_created_still_unregisters_it(world, agent, cluster_driver):
    from labs.services.allocation import allocation_pass
    from labs.services.controller import creates
    from labs.services.sessions import session_transition

    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    session_transition(session.pk, to="starting")
    row = LabSession.objects.select_related("template", "course", "student", "allocation__card__node").get(pk=session.pk)
    ref = creates._create(row)  # the driver made it ...
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student000"))  # ... as the stop came
    creates.bind_instance(str(session.pk), ref, recovered=False)  # then the create's answer is recorded

    for _ in range(3):
        reconcile_once()

    session.refresh_from_db()
    assert session.state == "stopped" and session.driver_ref == ref
    assert agent.driver.instances() == []


def test_a_stop_finds_an_instance_whose_bind_was_lost_and_unregisters_it_at_once(world, agent, cluster_driver, settings):
    from labs.services.controller import launch_spec
    from labs.services.sessions import session_transition

    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    session_transition(session.pk, to="starting")
    row = LabSession.objects.select_related("template", "course", "student", "allocation__card__node").get(pk=session.pk)
    ref = cluster_driver.create(launch_spec(row))  # a run created the instance, the node registered it
    allocation = row.allocation  # (as a device plugin does when the pod starts), and the run died
    agent.driver.register(ref, allocation.card.index, allocation.core_percent, allocation.memory_mib)
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student000"))

    reconcile_once()
    reconcile_once()

    session.refresh_from_db()
    assert session.state == "stopped" and session.driver_ref == ref  # found by its session id
    assert agent.driver.instances() == []  # not left for the residual sweep


def test_an_unreachable_agent_makes_its_node_unavailable_and_releases_nothing(world, agent, cluster_driver):
    session = running_session(world)
    agent.stop()
    report = reconcile()
    assert report.nodes_unreachable == [world["node"].name]
    node = Node.objects.get(pk=world["node"].pk)
    assert not node.available and node.unavailable_reason.startswith("agent unreachable")
    session.refresh_from_db()
    assert session.state == "running"
    assert Allocation.objects.get(session=session).released_at is None
    queued = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    allocation_pass()
    queued.refresh_from_db()
    assert queued.state == "queued" and queued.reason == "capacity: no healthy NPU card is available"

    agent.start()  # back on the same port
    reconcile()
    assert Node.objects.get(pk=world["node"].pk).available
    assert kinds() == ["node_unavailable", "node_available"]


def test_inventory_sync_marks_a_card_the_agent_reports_unhealthy(world, agent, cluster_driver):
    agent.driver.set_card_health(2, False)
    reconcile()
    assert not Card.objects.get(node=world["node"], index=2).healthy
    assert RepairEvent.objects.filter(kind="card_changed").count() == 1


def test_the_guarantee_monitor_flags_a_floor_not_delivered_over_the_window(world, agent, cluster_driver, settings):
    settings.LAB_GUARANTEE_MIN_SAMPLES = 3
    victim = str(uuid.uuid4())
    hog = str(uuid.uuid4())
    agent.driver.register(entity_id=victim, card_index=0, core_percent=40, memory_mib=1024, policy="elastic")
    agent.driver.register(entity_id=hog, card_index=0, core_percent=0, memory_mib=1024, policy="best-effort")
    agent.driver.set_demand(victim, 100)
    agent.driver.throttle(victim, 20)  # fault injection: the card delivers less than the floor
    for _ in range(3):
        report = reconcile()
    assert report.breaches == 1
    event = RepairEvent.objects.get(kind="guarantee_breach")
    assert event.entity_id == victim and "delivered 20 % AI Core against a floor of 40 %" in event.message
    reconcile()
    assert RepairEvent.objects.filter(kind="guarantee_breach").count() == 1  # once per window


@pytest.mark.parametrize("delivered", [31, 40])
def test_a_share_within_the_tolerance_is_not_a_breach(world, agent, cluster_driver, delivered):
    entity = str(uuid.uuid4())
    agent.driver.register(entity_id=entity, card_index=0, core_percent=40, memory_mib=1024)
    agent.driver.set_demand(entity, 100)
    agent.driver.throttle(entity, delivered)
    for _ in range(4):
        assert reconcile().breaches == 0


def test_a_node_whose_agent_is_back_takes_placements_again_at_the_next_quick_check(world, agent, cluster_driver):
    from labs.services.reconcile import nodes_recheck

    agent.stop()
    reconcile()
    assert not Node.objects.get(pk=world["node"].pk).available
    assert nodes_recheck() == []  # still down: nothing changes

    agent.start()

    assert nodes_recheck() == [world["node"].name]
    assert Node.objects.get(pk=world["node"].pk).available


def test_the_controller_leaves_an_unavailable_node_s_agent_alone_until_it_answers_its_quick_check(
    world, agent, cluster_driver, settings
):
    from labs.services.reconcile import nodes_recheck

    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    session = running_session(world)
    agent.stop()
    reconcile()  # the agent does not answer: the node is unavailable
    agent.start()  # it could answer now, but nothing has asked it yet
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="student000"))
    reconcile_once()
    reconcile_once()
    session.refresh_from_db()
    assert session.state == "stopped"
    assert {i.entity_id for i in agent.driver.instances()} == {session.driver_ref}  # not called

    assert nodes_recheck() == [world["node"].name]

    assert agent.driver.instances() == []  # its instances reconciled as it came back
    assert kinds() == ["node_unavailable", "node_available", "residual_unregistered"]


def test_each_instance_s_measured_memory_reaches_the_operator_s_card_page(world, agent, cluster_driver):
    from labs.models import InstanceSample
    from labs.selectors.operations import OperatorScope, card_instances

    session = running_session(world)
    agent.driver.set_demand(session.driver_ref, 0, memory_used_mib=1536)

    reconcile()

    sample = InstanceSample.objects.filter(entity_id=session.driver_ref).latest("taken_at")
    assert sample.memory_used_mib == 1536
    card = Allocation.objects.get(session=session).card
    (shown,) = card_instances(card=card, scope=OperatorScope(platform=True))
    assert (shown.session.pk, shown.memory_used_mib) == (session.pk, 1536)


def test_a_reading_without_demand_is_never_judged_a_breach(world, settings):
    """Real nodes report no demand: their readings show on the card page, the guarantee monitor skips them."""
    from django.utils import timezone

    from labs.models import InstanceSample
    from labs.services.reconcile import _check_guarantees

    settings.LAB_GUARANTEE_MIN_SAMPLES = 2
    now = timezone.now()
    starved = {"node": world["node"], "floor_percent": 40, "delivered_percent": 0, "memory_used_mib": 512}
    InstanceSample.objects.bulk_create(
        [InstanceSample(entity_id="real", taken_at=now, demand_percent=None, **starved) for _ in range(3)]
        + [InstanceSample(entity_id="simulated", taken_at=now, demand_percent=100, **starved) for _ in range(3)]
    )
    assert _check_guarantees(world["node"], now) == 1
    assert RepairEvent.objects.get(kind="guarantee_breach").entity_id == "simulated"
