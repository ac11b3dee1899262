"""Migration 0019 splits the usage records of labs pre-started for a class at their claim: the
course's part (the reservation's holder's) to the claim, the student's from it; back, they join."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("labs", "0018_affiliations")]
AFTER = [("labs", "0019_usage_split_at_the_claim")]
T = datetime.fromisoformat("2026-11-03T14:00:00+00:00")  # pre-started; claimed 30 min later, released 60 min later
CORE, MIB = 25, 16384


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def held(apps, *, session, student, start, end, card, course, template):
    """An allocation released at ``end`` and its record, as the release wrote them before 0019."""
    allocation = apps.get_model("labs", "Allocation").objects.create(
        session=session, card=card, course=course, core_percent=CORE, memory_mib=MIB, scenario="development"
    )
    apps.get_model("labs", "Allocation").objects.filter(pk=allocation.pk).update(created_at=start, released_at=end)
    seconds = round((end - start).total_seconds())
    return apps.get_model("labs", "UsageRecord").objects.create(
        allocation=allocation,
        session=session,
        student=student,
        course=course,
        institution=course.institution,
        template=template,
        started_at=start,
        ended_at=end,
        core_percent=CORE,
        memory_mib=MIB,
        core_percent_seconds=CORE * seconds,
        memory_mib_seconds=MIB * seconds,
    )


@pytest.mark.django_db(transaction=True)
def test_a_claimed_labs_record_is_split_at_the_claim_and_others_stay_as_they_were():
    old = migrate(BEFORE)
    institution = old.get_model("labs", "Institution").objects.create(name="Old University", slug="old")
    course = old.get_model("labs", "Course").objects.create(institution=institution, code="CLASS", title="t", term="t")
    template = old.get_model("labs", "LabTemplate").objects.create(
        institution=institution, name="lab", slug="lab", image="lab:1", core_percent=CORE, memory_mib=MIB
    )
    User = old.get_model("auth", "User")
    holder, student, other = (User.objects.create(username=name) for name in ("reserved-1", "student", "other"))
    node = old.get_model("labs", "Node").objects.create(name="n1")
    cards = [old.get_model("labs", "Card").objects.create(node=node, index=i, memory_mib=65536) for i in range(3)]
    reservation = old.get_model("labs", "Reservation").objects.create(
        course=course, template=template, count=2, start_time=T.time(), minutes=90, holder=holder
    )
    slot = old.get_model("labs", "ReservationSlot").objects.create(
        reservation=reservation, starts_at=T, ends_at=T + timedelta(minutes=90), prestarted_at=T
    )
    Session = old.get_model("labs", "LabSession")
    common = {"course": course, "template": template, "state": "stopped", "ended_at": T + timedelta(hours=1)}
    claimed = Session.objects.create(student=student, reservation_slot=slot, claimed_at=T + timedelta(minutes=30), **common)
    unclaimed = Session.objects.create(student=holder, reservation_slot=slot, **common)
    plain = Session.objects.create(student=other, **common)
    end = T + timedelta(hours=1)
    for session, card in ((claimed, cards[0]), (unclaimed, cards[1]), (plain, cards[2])):
        held(old, session=session, student=session.student, start=T, end=end, card=card, course=course, template=template)

    new = migrate(AFTER)
    records = new.get_model("labs", "UsageRecord").objects
    split = {r.student_id: r for r in records.filter(session_id=claimed.pk)}
    assert set(split) == {holder.pk, student.pk}
    assert (split[holder.pk].started_at, split[holder.pk].ended_at) == (T, T + timedelta(minutes=30))
    assert (split[student.pk].started_at, split[student.pk].ended_at) == (T + timedelta(minutes=30), end)
    for part in split.values():  # 25 % x 1800 s and 16 GiB x 1800 s each
        assert (part.core_percent_seconds, part.memory_mib_seconds) == (CORE * 1800, MIB * 1800)
    assert split[holder.pk].allocation_id == split[student.pk].allocation_id
    for session, student_id in ((unclaimed, holder.pk), (plain, other.pk)):
        (record,) = records.filter(session_id=session.pk)
        assert (record.student_id, record.started_at, record.core_percent_seconds) == (student_id, T, CORE * 3600)

    old = migrate(BEFORE)
    (joined,) = old.get_model("labs", "UsageRecord").objects.filter(session_id=claimed.pk)
    assert (joined.student_id, joined.started_at, joined.ended_at) == (student.pk, T, end)
    assert (joined.core_percent_seconds, joined.memory_mib_seconds) == (CORE * 3600, MIB * 3600)

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
