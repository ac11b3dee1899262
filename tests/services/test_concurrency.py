"""128 launches at once from several processes on PostgreSQL: the ledger stays exact."""

import subprocess
import sys
import time
from collections import defaultdict

import pytest
from django.db.models import Count, Sum

from labs.models import Allocation, Card, LabSession
from labs.services.allocation import allocation_pass
from tests.conftest import ROOT, child_env
from tests.factories import CARD_MIB, course_with_students, node_with_cards

PROCESSES = 4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("template_index", "quota", "expected_placed", "expected_reason"),
    [
        # small (5 %, 4 GiB): the course guarantee of 100 instances binds before the server's 128.
        (0, {"instance_count": 100}, 100, "course quota: 100 of 100 instances in use"),
        # medium (10 %, 8 GiB): card memory binds at 8 per card, 64 on the server.
        (
            1,
            {"instance_count": 128, "memory_mib": 16 * CARD_MIB},
            64,
            "card memory: needs 8 GiB; the most free on a healthy card is 0 GiB (node n1, card 0)",
        ),
    ],
    ids=["quota-binds", "capacity-binds"],
)
def test_128_simultaneous_launches_place_exactly_what_capacity_and_quota_allow(
    transactional_db, template_index, quota, expected_placed, expected_reason
):
    node_with_cards()
    course, templates, students, _ = course_with_students(128, quota=quota)
    template = templates[template_index]
    start_at = time.time() + 3  # every process launches at the same moment
    chunks = [students[i::PROCESSES] for i in range(PROCESSES)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.services.launcher",
                str(start_at),
                str(course.pk),
                str(template.pk),
                *[str(u.pk) for u in chunk],
            ],
            cwd=ROOT,
            env=child_env(),
            stderr=subprocess.PIPE,
        )
        for chunk in chunks
    ]
    for process in processes:
        _, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr.decode()[-3000:]
    allocation_pass()  # settles nothing new: every launch already ran a pass

    assert LabSession.objects.count() == 128
    assert LabSession.objects.filter(state="admitted").count() == expected_placed
    assert Allocation.objects.filter(released_at__isnull=True).count() == expected_placed
    queued = LabSession.objects.filter(state="queued")
    assert queued.count() == 128 - expected_placed
    assert {s.reason for s in queued} == {expected_reason}

    per_card = (
        Allocation.objects.filter(released_at__isnull=True)
        .values("card")
        .annotate(core=Sum("core_percent"), memory=Sum("memory_mib"), n=Count("id"))
    )
    for row in per_card:
        assert row["core"] <= 100 and row["memory"] <= CARD_MIB and row["n"] <= 16, row
    assert sum(row["n"] for row in per_card) <= 128
    # No session holds two allocations, and every admitted session holds one.
    holders = defaultdict(int)
    for session_id in Allocation.objects.values_list("session_id", flat=True):
        holders[session_id] += 1
    assert set(holders.values()) == {1}
    assert Card.objects.count() == 8
