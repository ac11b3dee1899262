"""Fair order in the queue: inside a course, less recent usage goes first (decayed, bounded); in a
cohort, the course using less of its guarantee goes first. Positions follow the same order."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.models import Allocation, LabSession, UsageRecord
from labs.selectors.sessions import queue_facts
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_stop
from tests.factories import CARD_MIB, TemplateFactory, course_with_students, node_with_cards

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fair_rules(settings):
    settings.LAB_FAIR_SHARE_HALF_LIFE_HOURS = 24
    settings.LAB_FAIR_SHARE_SECONDS_PER_PERCENT_HOUR = 30
    settings.LAB_FAIR_SHARE_MAX_DELAY_SECONDS = 1800


def used(world, index: int, *, hours: float, ended_hours_ago: float = 0) -> None:
    """Student ``index`` ran a 10 % lab for ``hours``, ending ``ended_hours_ago``."""
    session = session_launch(student=world["students"][index], course=world["course"], template=world["medium"])
    allocation_pass()
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="test"))
    end = timezone.now() - timedelta(hours=ended_hours_ago)
    UsageRecord.objects.filter(session=session).update(started_at=end - timedelta(hours=hours), ended_at=end)


def test_a_student_with_recent_usage_queues_behind_one_without(world):
    used(world, 0, hours=5)  # 50 %·h: 25 minutes back
    world["course"].quota.instance_count = 0
    world["course"].quota.save()
    heavy = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    fresh = session_launch(student=world["students"][1], course=world["course"], template=world["small"])

    delay = (LabSession.objects.get(pk=heavy.pk).queue_at - heavy.created_at).total_seconds()
    assert delay == pytest.approx(50 * 30, abs=5)
    assert LabSession.objects.get(pk=fresh.pk).queue_at == pytest.approx(fresh.created_at, abs=timedelta(seconds=1))
    facts = queue_facts(list(LabSession.objects.filter(pk__in=[heavy.pk, fresh.pk])))
    assert (facts[fresh.pk].position, facts[heavy.pk].position) == (1, 2)

    world["course"].quota.instance_count = 1
    world["course"].quota.save()
    assert allocation_pass().admitted == [str(fresh.pk)]


def test_old_usage_counts_for_little_and_the_delay_is_capped(world, settings):
    used(world, 0, hours=5, ended_hours_ago=72)  # three half-lives ago: an eighth
    old = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    assert (old.queue_at - old.created_at).total_seconds() == pytest.approx(50 / 8 * 30, abs=5)
    session_stop(session_id=old.pk, reason=Reason.of("session.stopped_by", who="test"))
    used(world, 1, hours=500)
    capped = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    assert (capped.queue_at - capped.created_at).total_seconds() == pytest.approx(1800, abs=1)


def test_in_a_cohort_the_course_using_less_of_its_guarantee_borrows_first(settings):
    settings.LAB_PLACEMENT = {**settings.LAB_PLACEMENT, "min_runtime_seconds": 3600}  # no reclaim in the way
    node_with_cards(cards=1)
    one = {"instance_count": 1, "core_percent": 20, "memory_mib": CARD_MIB, "cohort": "dept"}
    busy, _, busy_students, _ = course_with_students(4, quota=one, code="BUSY")
    less, _, less_students, _ = course_with_students(2, quota=one, code="LESS")
    course_with_students(0, quota={**one, "instance_count": 5, "core_percent": 100}, code="LEND")  # idle: lends
    small = TemplateFactory(institution=busy.institution, name="fifth", slug="fifth", core_percent=20, memory_mib=4096)
    busy.templates.add(small)
    less.templates.add(small)
    for student in busy_students[:3]:  # BUSY: its one guaranteed lab and two borrowed, 60 % of the card
        session_launch(student=student, course=busy, template=small)
        allocation_pass()
    session_launch(student=less_students[0], course=less, template=small)  # LESS: its guaranteed one
    allocation_pass()
    assert Allocation.objects.filter(released_at__isnull=True).count() == 4  # 80 %: room for one more
    # Both now ask to borrow; BUSY asked first, but already holds three times its guarantee.
    first = session_launch(student=busy_students[3], course=busy, template=small)
    later = session_launch(student=less_students[1], course=less, template=small)
    assert first.queue_at < later.queue_at

    assert allocation_pass().admitted == [str(later.pk)]
    assert LabSession.objects.get(pk=first.pk).state == "queued"
