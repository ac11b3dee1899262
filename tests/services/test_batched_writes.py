"""The controller's batched writes: many sessions per statement, the same outcome as one at a time."""

from datetime import timedelta

import pytest
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import Allocation, LabSession, UsageRecord
from labs.services.allocation import allocation_pass
from labs.services.rows import rows_update
from labs.services.sessions import (
    allocation_release,
    allocations_release,
    session_stop,
    sessions_note,
    sessions_transition,
)

STOPPED_BY = Reason.of("session.stopped_by", who="tester")


@pytest.fixture
def admitted(world):
    from labs.services.sessions import session_launch

    sessions = [session_launch(student=s, course=world["course"], template=world["small"]) for s in world["students"]]
    allocation_pass()
    return [str(s.pk) for s in sessions]


def states(ids):
    return dict(LabSession.objects.filter(pk__in=ids).values_list("pk", "state"))


def test_only_sessions_in_an_allowed_state_move_each_with_its_own_fields(admitted):
    first, second, third, fourth = admitted
    assert session_stop(session_id=first, reason=STOPPED_BY)  # the student came first
    versions = dict(LabSession.objects.filter(pk__in=admitted).values_list("pk", "version"))

    moved = sessions_transition(
        {sid: {"access_url": f"https://lab.invalid/{n}"} for n, sid in enumerate(admitted)},
        to=SessionState.STARTING,
        reason=Reason.of("session.requesting"),
        only_from={SessionState.ADMITTED},
    )

    assert moved == {second, third, fourth}
    rows = {str(s.pk): s for s in LabSession.objects.filter(pk__in=admitted)}
    assert rows[first].state == "stopped" and rows[first].access_url == ""
    assert rows[first].version == versions[rows[first].pk]
    for n, sid in enumerate(admitted[1:], start=1):
        assert rows[sid].state == "starting" and rows[sid].started_at is not None
        assert rows[sid].access_url == f"https://lab.invalid/{n}"
        assert rows[sid].reason_code == "session.requesting"
        assert rows[sid].version == versions[rows[sid].pk] + 1


def test_a_batch_to_an_end_releases_each_allocation_once_with_one_usage_record(admitted):
    LabSession.objects.filter(pk__in=admitted).update(state="stopping", stopping_at=timezone.now())
    Allocation.objects.filter(session_id__in=admitted).update(created_at=timezone.now() - timedelta(minutes=10))

    assert sessions_transition({sid: {} for sid in admitted}, to=SessionState.STOPPED) == set(admitted)
    assert sessions_transition({sid: {} for sid in admitted}, to=SessionState.STOPPED) == set()

    assert set(states(admitted).values()) == {"stopped"}
    assert Allocation.objects.filter(session_id__in=admitted, released_at__isnull=True).count() == 0
    records = UsageRecord.objects.filter(session_id__in=admitted)
    assert records.count() == len(admitted)
    assert all(590 <= r.core_percent_seconds / r.core_percent <= 610 for r in records)
    assert allocation_release(admitted[0]) is False
    assert allocations_release(admitted) == set()
    assert UsageRecord.objects.filter(session_id__in=admitted).count() == len(admitted)


def test_notes_change_only_sessions_in_the_state_whose_reason_differs(admitted):
    first, second, third, _ = admitted
    LabSession.objects.filter(pk__in=[first, second]).update(state="starting")
    pulling = Reason.of("session.requesting")
    LabSession.objects.filter(pk=first).update(reason_code=pulling.code, reason_params={})
    version = dict(LabSession.objects.filter(pk__in=admitted).values_list("pk", "version"))

    changed = sessions_note({first: pulling, second: pulling, third: pulling}, state=SessionState.STARTING)

    assert changed == {second}  # first had it already; third is not starting
    rows = {str(s.pk): s for s in LabSession.objects.filter(pk__in=admitted)}
    assert rows[second].reason_code == pulling.code and rows[second].version == version[rows[second].pk] + 1
    assert rows[third].reason_code != pulling.code and rows[third].version == version[rows[third].pk]


def test_rows_update_writes_each_rows_own_values_of_every_kind_and_nothing_else(admitted):
    first, second, third, _ = admitted
    at = timezone.now() - timedelta(hours=1)
    count = rows_update(
        LabSession,
        {
            first: {"selftest_visible_mib": 4096, "selftest_over_cap": True, "selftest_at": at, "reason_params": {"a": [1]}},
            second: {"selftest_visible_mib": None, "selftest_over_cap": False, "selftest_at": None, "reason_params": {}},
            third: {},  # nothing to write
        },
    )

    assert count == 2
    rows = {str(s.pk): s for s in LabSession.objects.filter(pk__in=admitted)}
    assert (rows[first].selftest_visible_mib, rows[first].selftest_over_cap, rows[first].selftest_at) == (4096, True, at)
    assert rows[first].reason_params == {"a": [1]}
    assert (rows[second].selftest_visible_mib, rows[second].selftest_at) == (None, None)
    assert rows[third].selftest_at is None and rows[third].state == "admitted"


def test_rows_update_sends_one_statement_whatever_the_number_of_rows(admitted):
    """Each column's values go as one array: a batch of two and a batch of three send the same
    statement (psycopg parses it once, PostgreSQL may keep its plan), a column of nulls too."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    at = timezone.now()
    with CaptureQueriesContext(connection) as two:
        rows_update(LabSession, {sid: {"selftest_at": at, "selftest_visible_mib": None} for sid in admitted[:2]})
    with CaptureQueriesContext(connection) as three:
        rows_update(LabSession, {sid: {"selftest_at": None, "selftest_visible_mib": None} for sid in admitted[1:]})

    assert [q["sql"].split(" FROM ")[0] for q in two.captured_queries] == [
        q["sql"].split(" FROM ")[0] for q in three.captured_queries
    ]
    assert len(two.captured_queries) == len(three.captured_queries) == 1
    selftests = {str(pk): at for pk, at in LabSession.objects.filter(pk__in=admitted).values_list("pk", "selftest_at")}
    assert [selftests[sid] for sid in admitted] == [at, None, None, None]
