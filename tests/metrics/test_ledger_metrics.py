"""/metrics reports what the ledger holds: cards, nodes, sessions, queues, admissions, repairs."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.metrics import quantile
from labs.models import Card, Course, LabSession, Node, RepairEvent
from labs.services.agents import node_mark_unavailable
from labs.services.allocation import allocation_pass
from labs.services.operations import node_drain
from labs.services.sessions import session_launch, session_stop
from tests.factories import (
    CourseFactory,
    InstitutionFactory,
    TemplateFactory,
    UserFactory,
    course_with_students,
    node_with_cards,
)
from tests.metrics.helpers import scrape, values

GIB = 1024**3


def launch_all(world, template_names=("small", "small", "small", "medium")) -> list[LabSession]:
    return [
        session_launch(student=student, course=world["course"], template=world[name])
        for student, name in zip(world["students"], template_names, strict=True)
    ]


def test_each_card_reports_the_floors_memory_and_instances_reserved_on_it(world):
    launch_all(world)
    allocation_pass()

    samples = scrape()

    # binpack: the four sessions share card 0.
    assert values(samples, "npu_lab_card_core_reserved_ratio", "node", "card") == {
        ("n1", str(i)): 0.25 if i == 0 else 0 for i in range(8)
    }
    memory = values(samples, "npu_lab_card_memory_reserved_bytes", "node", "card")
    assert memory[("n1", "0")] == 20 * GIB
    assert memory[("n1", "1")] == 0
    assert values(samples, "npu_lab_card_instances", "node", "card")[("n1", "0")] == 4
    assert set(values(samples, "npu_lab_card_instance_limit", "node", "card").values()) == {16}
    assert set(values(samples, "npu_lab_card_memory_bytes", "node", "card").values()) == {64 * GIB}
    assert set(values(samples, "npu_lab_card_healthy", "node", "card").values()) == {1}


def test_a_released_allocation_no_longer_counts_on_its_card(world):
    first, *_ = launch_all(world)
    allocation_pass()
    session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="tester"))

    samples = scrape()

    assert values(samples, "npu_lab_card_instances", "node", "card")[("n1", "0")] == 3
    assert values(samples, "npu_lab_card_core_reserved_ratio", "node", "card")[("n1", "0")] == 0.2


def test_a_card_with_an_inference_instance_may_hold_eight(world):
    vllm = TemplateFactory(
        institution=world["course"].institution, name="vllm", slug="vllm", core_percent=20, memory_mib=16384, scenario="inference"
    )
    world["course"].templates.add(vllm)
    session_launch(student=world["students"][0], course=world["course"], template=vllm)
    allocation_pass()

    limits = values(scrape(), "npu_lab_card_instance_limit", "node", "card")

    assert limits[("n1", "0")] == 8
    assert limits[("n1", "1")] == 16


def test_a_card_its_agent_or_an_operator_calls_unhealthy_reads_zero(world):
    Card.objects.filter(node=world["node"], index=3).update(healthy=False)
    Card.objects.filter(node=world["node"], index=5).update(disabled=True, disabled_reason="fan")

    samples = scrape()

    healthy = values(samples, "npu_lab_card_healthy", "node", "card")
    assert [index for (_, index), value in sorted(healthy.items()) if value == 0] == ["3", "5"]
    assert values(samples, "npu_lab_cards", "status") == {("healthy",): 6, ("unhealthy",): 1, ("disabled",): 1}


def test_nodes_are_available_drained_or_unavailable(world):
    operator = UserFactory(username="operator")
    node_with_cards("n2")
    node_with_cards("n3")
    node_drain(node=Node.objects.get(name="n2"), by=operator, reason="firmware update")
    node_mark_unavailable(Node.objects.get(name="n3"), reason="agent unreachable: timed out")

    samples = scrape()

    assert values(samples, "npu_lab_node_available", "node") == {("n1",): 1, ("n2",): 0, ("n3",): 0}
    assert values(samples, "npu_lab_nodes", "status") == {("available",): 1, ("drained",): 1, ("unavailable",): 1}


def test_a_drained_node_whose_agent_is_gone_counts_as_drained(world):
    node = world["node"]
    node_drain(node=node, by=UserFactory(username="operator"), reason="maintenance")
    node_mark_unavailable(node, reason="agent unreachable: timed out")

    assert values(scrape(), "npu_lab_nodes", "status")[("drained",)] == 1


def test_open_sessions_are_counted_by_state_and_by_course(db):
    node_with_cards()
    course, templates, students, _ = course_with_students(4, quota={"instance_count": 2}, code="AI101")
    for student in students:
        session_launch(student=student, course=course, template=templates[0])
    allocation_pass()
    # A course with nothing open still reads 0; an archived one is not listed.
    idle = CourseFactory(institution=course.institution, code="IDLE")
    CourseFactory(institution=course.institution, code="OLD", archived_at=timezone.now())

    samples = scrape()

    assert values(samples, "npu_lab_sessions", "state") == {
        ("queued",): 2,
        ("admitted",): 2,
        ("starting",): 0,
        ("running",): 0,
        ("stopping",): 0,
    }
    by_course = values(samples, "npu_lab_course_sessions", "institution", "course", "term", "state")
    assert by_course[("uni-test", "AI101", course.term, "queued")] == 2
    assert by_course[("uni-test", "AI101", course.term, "admitted")] == 2
    assert by_course[("uni-test", "IDLE", idle.term, "queued")] == 0
    assert {key[1] for key in by_course} == {"AI101", "IDLE"}


def test_the_oldest_queued_session_says_how_long_it_has_waited(db):
    node_with_cards()
    course, templates, students, _ = course_with_students(3, quota={"instance_count": 1}, code="AI101")
    for student in students:
        session_launch(student=student, course=course, template=templates[0])
    allocation_pass()
    oldest = LabSession.objects.filter(state="queued").order_by("created_at").first()
    LabSession.objects.filter(pk=oldest.pk).update(created_at=timezone.now() - timedelta(seconds=120))
    CourseFactory(institution=course.institution, code="QUIET")

    ages = values(scrape(), "npu_lab_queue_oldest_age_seconds", "course")

    assert 120 <= ages[("AI101",)] < 150
    assert ages[("QUIET",)] == 0


def test_admission_rates_and_wait_quantiles_come_from_admission_times(world):
    sessions = launch_all(world)
    allocation_pass()
    now = timezone.now()
    waits_and_ages = [(10, 30), (100, 200), (40, 250), (5, 3600)]  # (queued for, admitted this long ago) in seconds
    for session, (waited, ago) in zip(sessions, waits_and_ages, strict=True):
        admitted_at = now - timedelta(seconds=ago)
        LabSession.objects.filter(pk=session.pk).update(
            admitted_at=admitted_at, created_at=admitted_at - timedelta(seconds=waited)
        )

    samples = scrape()

    rates = values(samples, "npu_lab_admissions_per_second", "window")
    assert rates[("1m",)] == pytest.approx(1 / 60)
    assert rates[("5m",)] == pytest.approx(3 / 300)
    wait = values(samples, "npu_lab_queue_wait_seconds", "quantile")
    assert wait == {("0.5",): pytest.approx(40), ("0.9",): pytest.approx(88), ("0.99",): pytest.approx(98.8)}


def test_without_admissions_in_the_window_the_rate_is_zero_and_no_wait_is_made_up(world):
    launch_all(world)

    samples = scrape()

    assert set(values(samples, "npu_lab_admissions_per_second", "window").values()) == {0}
    assert "npu_lab_queue_wait_seconds" not in samples


def test_repair_events_are_counted_by_kind_and_breaches_over_the_guarantee_window(world, settings):
    settings.LAB_GUARANTEE_WINDOW_SECONDS = 300
    node = world["node"]
    for kind in ("residual_unregistered", "residual_unregistered", "card_rebound", "guarantee_breach", "guarantee_breach"):
        RepairEvent.objects.create(kind=kind, node=node, message="test")
    old = RepairEvent.objects.filter(kind="guarantee_breach").first()
    RepairEvent.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=1))

    samples = scrape()

    totals = values(samples, "npu_lab_repair_events_total", "kind")
    assert set(totals) == {(kind,) for kind in RepairEvent.Kind.values}
    assert totals[("residual_unregistered",)] == 2
    assert totals[("card_rebound",)] == 1
    assert totals[("guarantee_breach",)] == 2
    assert totals[("orphan_deleted",)] == 0
    assert values(samples, "npu_lab_guarantee_breaches", "node") == {("n1",): 1}


def test_failed_sessions_are_a_counter(world):
    first, second, *_ = launch_all(world)
    LabSession.objects.filter(pk__in=[first.pk, second.pk]).update(state="failed", ended_at=timezone.now())

    assert values(scrape(), "npu_lab_sessions_failed_total") == {(): 2}


def test_a_scrape_costs_the_same_queries_however_big_the_cluster(db):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape()
        return len(captured)

    node_with_cards("n1")
    course, templates, students, _ = course_with_students(2, code="AI101")
    session_launch(student=students[0], course=course, template=templates[0])
    allocation_pass()
    small = queries()

    for name in ("n2", "n3", "n4"):
        node_with_cards(name)
    for n in range(3):
        more, more_templates, more_students, _ = course_with_students(4, code=f"BIG{n}")
        for student in more_students:
            session_launch(student=student, course=more, template=more_templates[0])
    allocation_pass()
    RepairEvent.objects.create(kind="card_rebound", node=Node.objects.get(name="n2"), message="test")

    # 14: one more than before class reservations, for the three npu_lab_reservation_*_total counters.
    assert queries() == small == 15
    assert Course.objects.count() == 4


def test_quantiles_interpolate_between_closest_ranks():
    assert quantile([4.0, 1.0, 3.0, 2.0, 5.0], 0.5) == 3.0
    assert quantile([1.0, 2.0], 0.5) == 1.5
    assert quantile([1.0, 2.0], 0.99) == pytest.approx(1.99)
    assert quantile([7.0], 0.9) == 7.0
    assert quantile([1.0, 2.0, 3.0], 0) == 1.0
    assert quantile([1.0, 2.0, 3.0], 1) == 3.0
    assert math.isnan(quantile([], 0.5))
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_labels_are_escaped_so_any_node_name_parses(db):
    Node.objects.create(name='odd "node"\\name')
    Card.objects.create(node=Node.objects.get(name='odd "node"\\name'), index=0, memory_mib=32768)

    assert values(scrape(), "npu_lab_card_memory_bytes", "node", "card") == {('odd "node"\\name', "0"): 32 * GIB}


def test_a_course_label_says_institution_code_and_term(db):
    institution = InstitutionFactory(slug="other-uni", name="Other")
    CourseFactory(institution=institution, code="AI101", term="2027 Spring")

    by_course = values(scrape(), "npu_lab_course_sessions", "institution", "course", "term", "state")

    assert by_course[("other-uni", "AI101", "2027 Spring", "queued")] == 0


def test_the_readme_lists_every_metric(world):
    launch_all(world)
    allocation_pass()  # an admission now: the wait quantiles have samples
    RepairEvent.objects.create(kind=RepairEvent.Kind.GUARANTEE_BREACH, node=world["node"], message="test")
    # An agent's readings: the card health gauges have samples.
    Card.objects.filter(node=world["node"]).update(temperature_celsius=40, power_milliwatts=90_000, memory_used_mib=1024)
    readme = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    table = readme.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(npu_lab_\w+)` \|", table, flags=re.MULTILINE))

    assert listed == set(scrape())


def test_a_card_marked_isolation_suspect_shows_in_its_gauge_and_the_breach_is_counted(world):
    from labs.services.controller import reconcile_once
    from labs.services.selftest import selftest_record

    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    reconcile_once()
    session.refresh_from_db()
    assert values(scrape(), "npu_lab_cards_isolation_suspect") == {(): 0}
    selftest_record(session_id=str(session.pk), secret=session.secret, visible_mib=24576)

    samples = scrape()
    assert values(samples, "npu_lab_cards_isolation_suspect") == {(): 1}
    assert values(samples, "npu_lab_repair_events_total", "kind")[("isolation_breach",)] == 1
