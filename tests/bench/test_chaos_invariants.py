"""``make chaos``'s ledger checks (bench.chaos.ledger.InvariantMonitor) against a ledger on PostgreSQL.

The run checks these every 0.5 s while faults hit the portal; a check that never fires proves
nothing, so here each one is shown firing on a ledger written to break it (straight into the
tables, as a bug would) and staying quiet on a sound one.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from psycopg.conninfo import make_conninfo

from bench.chaos.ledger import InvariantMonitor
from labs.models import Allocation, Card, LabSession
from tests.factories import TemplateFactory, course_with_students, node_with_cards

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the chaos harness reads PostgreSQL")


@pytest.fixture
def monitor(transactional_db):
    settings = connection.settings_dict
    watcher = InvariantMonitor(
        make_conninfo(
            host=settings["HOST"] or "127.0.0.1",
            port=settings["PORT"] or 5432,
            user=settings["USER"],
            password=settings["PASSWORD"] or None,
            dbname=settings["NAME"],
        )
    )
    yield watcher
    watcher.ledger.close()


@pytest.fixture
def world(transactional_db):
    node = node_with_cards("n1", cards=2)
    inference = TemplateFactory(name="inference", slug="inference", core_percent=10, memory_mib=4096, scenario="inference")
    course, templates, students, _ = course_with_students(20, templates=[inference])
    return {"cards": list(Card.objects.filter(node=node).order_by("index")), "course": course, "students": students}


def session(world, student: int, state: str = "running") -> LabSession:
    ended = timezone.now() if state in ("stopped", "failed") else None
    return LabSession.objects.create(
        student=world["students"][student], course=world["course"], template=world["course"].templates.first(),
        state=state, ended_at=ended,
    )  # fmt: skip


def allocate(world, lab: LabSession, *, card: int = 0, core: int = 5, mib: int = 4096, scenario: str = "development",
             released: bool = False) -> Allocation:  # fmt: skip
    return Allocation.objects.create(
        session=lab, card=world["cards"][card], course=world["course"], core_percent=core, memory_mib=mib,
        scenario=scenario, released_at=timezone.now() if released else None,
    )  # fmt: skip


def kinds(monitor: InvariantMonitor) -> list[str]:
    monitor.check_once()
    return sorted({v.kind for v in monitor.violations})


def test_a_sound_ledger_at_every_cap_raises_nothing_and_the_caps_are_seen(monitor, world):
    for i in range(4):
        allocate(world, session(world, i), card=0, core=25, mib=8192)  # 100 % AI Core
    for i in range(4, 12):
        allocate(world, session(world, i), card=1, core=10, mib=8192, scenario="inference")  # 8 inference, 64 GiB

    assert kinds(monitor) == []
    assert (monitor.max_core, monitor.max_memory_share, monitor.max_inference_instances) == (100, 1.0, 8)


@pytest.mark.parametrize(
    "overload",
    [
        {"count": 5, "core": 21, "mib": 1024},  # 105 % of AI Core
        {"count": 5, "core": 5, "mib": 16384 + 128},  # more than the card's 64 GiB
        {"count": 17, "core": 5, "mib": 1024},  # 17 development instances
        {"count": 9, "core": 5, "mib": 1024, "scenario": "inference"},  # 9 with an inference instance
    ],
)
def test_a_card_over_any_one_of_its_limits_is_flagged(monitor, world, overload):
    for i in range(overload["count"]):
        scenario = overload.get("scenario", "development") if i == 0 else "development"
        allocate(world, session(world, i), core=overload["core"], mib=overload["mib"], scenario=scenario)

    assert kinds(monitor) == ["card over its limits"]


def test_an_ended_session_holding_its_allocation_and_a_running_one_without_are_flagged(monitor, world):
    allocate(world, session(world, 0, "stopped"))
    allocate(world, session(world, 1), released=True)

    assert kinds(monitor) == ["allocation out of step", "release not exactly once"]
    assert sum(v.kind == "allocation out of step" for v in monitor.violations) == 2


def test_a_release_whose_time_changes_is_a_second_release(monitor, world):
    allocation = allocate(world, session(world, 0, "stopped"), released=True)
    monitor.check_once()
    Allocation.objects.filter(pk=allocation.pk).update(released_at=allocation.released_at + timedelta(seconds=3))

    assert "released twice" in kinds(monitor)


def test_a_student_with_two_open_sessions_is_flagged(monitor, world):
    allocate(world, session(world, 0))
    session(world, 0, "queued")

    assert kinds(monitor) == ["two open sessions"]
