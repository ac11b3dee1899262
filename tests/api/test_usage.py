"""Usage through the API: per student, for a time range, as JSON and as CSV."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from labs.domain.reasons import Reason
from labs.models import Allocation, UsageRecord
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_stop


def held_two_hours(world):
    """Student 0's medium lab (10 % / 8 GiB), launched 3 hours ago and held from then until 1 hour ago."""
    session = session_launch(student=world["students"][0], course=world["course"], template=world["medium"])
    allocation_pass()
    assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="test"))
    now = timezone.now()
    held = {"started_at": now - timedelta(hours=3), "ended_at": now - timedelta(hours=1)}
    Allocation.objects.filter(session=session).update(created_at=held["started_at"], released_at=held["ended_at"])
    UsageRecord.objects.filter(session=session).update(**held, core_percent_seconds=10 * 7200, memory_mib_seconds=8192 * 7200)
    session.__class__.objects.filter(pk=session.pk).update(created_at=now - timedelta(hours=3))
    return now


def test_usage_counts_what_allocations_held_in_the_range(api, world):
    now = held_two_hours(world)
    url = f"/api/v1/courses/{world['course'].pk}/usage/"
    rows = {r["username"]: r for r in api.call("GET", url).json()["rows"]}
    mine = rows[world["students"][0].username]
    assert mine["sessions"] == 1
    assert round(mine["core_percent_hours"], 2) == 20.0  # 10 % for 2 hours
    assert round(mine["gib_hours"], 2) == 16.0  # 8 GiB for 2 hours
    assert rows[world["students"][1].username]["sessions"] == 0
    since = (now - timedelta(hours=2)).isoformat()
    narrowed = api.call("GET", url, data={"since": since, "student": world["students"][0].username}).json()["rows"]
    assert [r["username"] for r in narrowed] == [world["students"][0].username]
    assert round(narrowed[0]["core_percent_hours"], 2) == 10.0  # only the last hour of it is in range
    assert narrowed[0]["sessions"] == 0  # launched before the range


def test_usage_as_csv(api, world):
    held_two_hours(world)
    response = api.call("GET", f"/api/v1/courses/{world['course'].pk}/usage/", data={"format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == len(world["students"])
    first = next(r for r in rows if r["username"] == world["students"][0].username)
    assert first["core_percent_hours"] == "20.00" and first["sessions"] == "1"
    by_accept = api.call("GET", f"/api/v1/courses/{world['course'].pk}/usage/", headers={"Accept": "text/csv"})
    assert by_accept.content == response.content


def test_a_range_that_ends_before_it_starts_is_invalid(api, world):
    response = api.call(
        "GET",
        f"/api/v1/courses/{world['course'].pk}/usage/",
        data={"since": "2026-02-01T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
    )
    assert response.status_code == 400
    assert "until" in response.json()["error"]["fields"]


def test_the_usage_csv_neutralises_text_a_spreadsheet_would_run(api, world):
    student = world["students"][0]
    get_user_model().objects.filter(pk=student.pk).update(username="-2+3", first_name="=cmd|' /C calc'!A0", last_name="Smith")
    held_two_hours(world)

    response = api.call("GET", f"/api/v1/courses/{world['course'].pk}/usage/", data={"format": "csv"})

    rows = list(csv.reader(io.StringIO(response.content.decode())))
    hostile = next(r for r in rows if r[0] == "'-2+3")
    assert hostile[1] == "'=cmd|' /C calc'!A0 Smith"
    assert hostile[2:] == ["1", "20.00", "16.00"]
    assert api.call("GET", f"/api/v1/courses/{world['course'].pk}/usage/").json()["rows"][0]["username"] == "-2+3"
