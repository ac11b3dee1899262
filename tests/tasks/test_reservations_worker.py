"""Class reservations over a real worker and beat, the simulator driver, and students launching
from several processes at the same moment."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from labs.models import Allocation, LabSession, UsageRecord
from labs.services.reservations import reservation_book
from tests.conftest import ROOT, child_env, wait_for
from tests.factories import TemplateFactory, course_with_students, node_with_cards

GIB = 1024


@pytest.mark.slow
def test_beat_pre_starts_the_class_hands_each_lab_to_one_student_and_stops_the_unclaimed(start_worker):
    node_with_cards(cards=2)
    course, _, students, instructor = course_with_students(
        8, quota={"instance_count": 1, "core_percent": 25, "memory_mib": 16 * GIB}, code="CLASS", templates=[]
    )
    lab = TemplateFactory(institution=course.institution, name="lab", slug="lab", core_percent=25, memory_mib=16 * GIB)
    course.templates.add(lab)
    starts = timezone.now() + timedelta(seconds=25)
    reservation = reservation_book(
        course=course, template=lab, count=5, slots=[(starts, starts + timedelta(minutes=30))], by=instructor
    )
    worker = start_worker(
        beat=True,
        LAB_SIMULATOR_DELAY_SECONDS="0.2",
        LAB_CONTROLLER_SECONDS="0.5",
        LAB_RESERVATION_CHECK_SECONDS="1",
        LAB_RESERVATION_PRESTART_SECONDS="600",
        LAB_RESERVATION_GRACE_SECONDS="5",
    )
    prestarted = LabSession.objects.filter(reservation_slot__reservation=reservation)
    wait_for(
        lambda: prestarted.filter(state="running").count() == 5,
        timeout=60,
        message=lambda: f"five running labs; worker log:\n{worker.output()[-3000:]}",
    )
    assert prestarted.count() == 5  # beat ran the rule many times; the slot was pre-started once
    assert set(prestarted.values_list("student_id", flat=True)) == {reservation.holder_id}

    # Seven students launch at once from three processes: five are handed the running labs.
    launch_at = time.time() + 2
    chunks = [students[i:7:3] for i in range(3)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.services.launcher", str(launch_at), str(course.pk), str(lab.pk)]
            + [str(u.pk) for u in chunk],
            cwd=ROOT,
            env=child_env(),
            stderr=subprocess.PIPE,
        )
        for chunk in chunks
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()[-3000:]
    claimed = prestarted.filter(claimed_at__isnull=False)
    owners = Counter(claimed.values_list("student_id", flat=True))
    assert claimed.count() == 5 and set(owners.values()) == {1}  # five students, one lab each
    assert set(owners) <= {u.pk for u in students[:7]}
    assert Counter(LabSession.objects.filter(student__in=students[:7]).values_list("student_id", flat=True)) == {
        u.pk: 1 for u in students[:7]
    }
    assert all(s.running_at >= s.claimed_at for s in claimed)  # its lifetime counts from the hand-over

    # Nobody claims from here on: after the start and the grace the rule finds nothing to stop.
    wait_for(lambda: timezone.now() > starts + timedelta(seconds=8), timeout=40)
    time.sleep(2)  # the subject: beat's sweeps over a window in which nothing may be stopped
    assert prestarted.filter(state="running").count() == 5
    assert not prestarted.filter(reason_code="session.reservation_unclaimed").exists()


@pytest.mark.slow
def test_beat_stops_the_labs_nobody_claimed_after_the_grace_and_releases_each_once(start_worker):
    node_with_cards(cards=1)
    course, _, _, instructor = course_with_students(
        4, quota={"instance_count": 1, "core_percent": 25, "memory_mib": 16 * GIB}, code="CLASS", templates=[]
    )
    lab = TemplateFactory(institution=course.institution, name="lab", slug="lab", core_percent=25, memory_mib=16 * GIB)
    course.templates.add(lab)
    starts = timezone.now() + timedelta(seconds=8)
    reservation = reservation_book(
        course=course, template=lab, count=3, slots=[(starts, starts + timedelta(minutes=30))], by=instructor
    )
    worker = start_worker(
        beat=True,
        LAB_SIMULATOR_DELAY_SECONDS="0.2",
        LAB_CONTROLLER_SECONDS="0.5",
        LAB_RESERVATION_CHECK_SECONDS="1",
        LAB_RESERVATION_GRACE_SECONDS="4",
    )
    prestarted = LabSession.objects.filter(reservation_slot__reservation=reservation)
    wait_for(
        lambda: prestarted.filter(state="stopped").count() == 3,
        timeout=60,
        message=lambda: f"three stopped labs; worker log:\n{worker.output()[-3000:]}",
    )
    assert prestarted.count() == 3
    for session in prestarted:
        assert session.reason_code == "session.reservation_unclaimed" and session.ended_at >= starts + timedelta(seconds=4)
        assert session.running_at is not None  # it ran, a lead time ahead, then nobody came
        assert Allocation.objects.filter(session=session, released_at__isnull=False).count() == 1
        assert UsageRecord.objects.filter(session=session).count() == 1


@pytest.mark.slow
def test_the_rule_run_by_several_processes_at_once_pre_starts_a_slot_once(transactional_db):
    node_with_cards(cards=1)
    course, _, _, _ = course_with_students(
        4, quota={"instance_count": 1, "core_percent": 25, "memory_mib": 16 * GIB}, code="CLASS", templates=[]
    )
    lab = TemplateFactory(institution=course.institution, name="lab", slug="lab", core_percent=25, memory_mib=16 * GIB)
    course.templates.add(lab)
    starts = timezone.now() + timedelta(minutes=5)
    reservation = reservation_book(course=course, template=lab, count=3, slots=[(starts, starts + timedelta(minutes=30))])
    at = time.time() + 3
    script = (
        "import django, time; django.setup(); from labs.services.reservations import reservations_enforce; "
        f"time.sleep(max(0, {at} - time.time())); print(len(reservations_enforce().sessions))"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script], cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    made = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()[-3000:]
        made.append(int(out.decode().split()[-1]))
    assert sorted(made) == [0, 0, 0, 3]
    assert LabSession.objects.filter(reservation_slot__reservation=reservation).count() == 3
