"""The usage ledger: every allocation's life becomes one record, exactly once, when it is released;
windows clip spans; open allocations count up to now; the backfill gives old allocations theirs."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import Allocation, LabSession, UsageRecord
from labs.selectors.usage import Totals, usage_spans, usage_totals_by_institution
from labs.services.allocation import allocation_pass
from labs.services.sessions import allocation_release, session_launch, session_stop, session_transition

pytestmark = pytest.mark.django_db
STOP = Reason.of("session.stopped_by", who="test")


def admitted(world, index=0, *, hours_ago: float = 2):
    session = session_launch(student=world["students"][index], course=world["course"], template=world["medium"])
    allocation_pass()
    Allocation.objects.filter(session=session).update(created_at=timezone.now() - timedelta(hours=hours_ago))
    return session


def test_a_release_writes_one_record_with_who_what_and_how_much(world):
    session = admitted(world)
    assert not UsageRecord.objects.exists()  # open: nothing recorded yet

    assert session_stop(session_id=session.pk, reason=STOP)

    record = UsageRecord.objects.get()
    allocation = Allocation.objects.get(session=session)
    assert (record.allocation_id, record.session_id, record.student_id) == (allocation.pk, session.pk, session.student_id)
    assert (record.course_id, record.institution_id, record.template_id) == (
        world["course"].pk,
        world["course"].institution_id,
        world["medium"].pk,
    )
    assert (record.started_at, record.ended_at) == (allocation.created_at, allocation.released_at)
    assert record.core_percent_seconds == pytest.approx(10 * 7200, abs=10)
    assert record.memory_mib_seconds == pytest.approx(8192 * 7200, abs=8192 * 2)


def test_release_and_its_record_happen_once_however_often_they_are_asked(world):
    session = admitted(world)
    assert session_stop(session_id=session.pk, reason=STOP)
    assert not session_stop(session_id=session.pk, reason=STOP)
    assert not allocation_release(session.pk)
    assert not session_transition(session.pk, to=SessionState.STOPPED, reason=STOP)
    assert UsageRecord.objects.count() == 1
    record = UsageRecord.objects.get()
    with pytest.raises(IntegrityError), transaction.atomic():  # a second record for it cannot exist
        UsageRecord.objects.create(**{f.attname: getattr(record, f.attname) for f in UsageRecord._meta.concrete_fields[1:]})


def test_spans_are_clipped_to_the_window_and_open_ones_count_up_to_now(world):
    closed = admitted(world, 0, hours_ago=3)
    session_stop(session_id=closed.pk, reason=STOP)
    admitted(world, 1, hours_ago=1)  # still open
    now = timezone.now()

    def totals(since, until):
        total = Totals()
        for span in usage_spans(since=since, until=until, courses=[world["course"].pk], now=now):
            total.add(span, span.seconds_within(since, until))
        return total

    last_two_hours = totals(now - timedelta(hours=2), now)
    assert last_two_hours.core_percent_hours == pytest.approx(10 * 2 + 10 * 1, abs=0.01)  # 2 h of the closed, 1 h open
    assert last_two_hours.gib_hours == pytest.approx(8 * 3, abs=0.01)
    assert totals(now - timedelta(days=1), now).core_percent_hours == pytest.approx(10 * 3 + 10 * 1, abs=0.01)
    assert totals(now - timedelta(days=2), now - timedelta(days=1)).core_percent_hours == 0
    other = list(usage_spans(since=now - timedelta(days=1), until=now, students=[world["students"][2].pk], now=now))
    assert other == []


def test_the_institution_counter_only_grows_when_an_open_allocation_closes(world):
    session = admitted(world, hours_ago=1)
    slug = world["course"].institution.slug
    before = usage_totals_by_institution()[slug].core_percent_seconds
    session_stop(session_id=session.pk, reason=STOP)
    after = usage_totals_by_institution()[slug].core_percent_seconds
    assert before == pytest.approx(10 * 3600, abs=20) and after >= before - 1


def test_the_migration_backfills_allocations_released_before_the_ledger(world):
    session = admitted(world, hours_ago=2)
    LabSession.objects.filter(pk=session.pk).update(state="stopped", ended_at=timezone.now())
    Allocation.objects.filter(session=session).update(released_at=timezone.now())  # released the old way: no record
    backfill = importlib.import_module("labs.migrations.0011_usage_records").backfill
    # The models as that migration knew them (the tables have the same columns since).
    then = MigrationLoader(connection).project_state(("labs", "0011_usage_records")).apps

    backfill(then, None)
    backfill(then, None)  # again: nothing more

    record = UsageRecord.objects.get()
    assert record.session_id == session.pk and record.core_percent_seconds == pytest.approx(10 * 7200, abs=10)
