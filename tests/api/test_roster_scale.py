"""The roster sync at its limit (5,000 rows) through the API, with the benchmark's own measurement:
the second identical PUT writes nothing and reads in a handful of queries."""

from __future__ import annotations

import pytest
from django.test import Client

from bench.roster_sync import roster_body, timed_sync
from labs.models import Enrollment


@pytest.mark.slow
def test_a_roster_of_5000_is_synced_and_a_second_sync_writes_nothing(world, make_token):
    course, token = world["course"], make_token(world["course"].institution)
    url = f"/api/v1/courses/{course.pk}/roster/"
    body = roster_body(world["instructor"].username, 4999)
    first = timed_sync(Client(), url, token, body)
    assert first.counts["added"] == 4999 and first.counts["removed"] == len(world["students"])
    assert Enrollment.objects.filter(course=course).count() == 5000
    second = timed_sync(Client(), url, token, body)
    assert second.counts == {"added": 0, "updated": 0, "unchanged": 5000, "removed": 0, "rejected": 0}
    assert second.writes == 0
    # Bulk reads: the number of queries does not grow with the roster.
    assert second.queries < 30
