"""The sessions list answers from rows (``api.serializers.session_rows_data``) exactly what
``SessionSerializer`` answers from the sessions: every key, value and format, in the reader's
language and the portal's time zone, page by page and filtered."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone, translation
from rest_framework import renderers

from api.renderers import JSONRenderer
from api.selectors import session_list_of, session_rows
from api.serializers import SessionSerializer, session_rows_data
from labs.domain.states import SessionState
from labs.models import LabSession


@pytest.fixture
def sessions(world) -> list[LabSession]:
    """Sessions in every shape a row can take: queued with a reason and its parameters, running with
    an access URL, ended, microseconds and none, two students with one reason."""
    now = datetime(2026, 11, 30, 9, 15, 42, 123456, tzinfo=UTC)
    students = world["students"]
    made = [
        LabSession.objects.create(
            course=world["course"],
            template=world["small"],
            student=students[0],
            state=SessionState.QUEUED,
            reason_code="node.host_memory_too_small",
            reason_params={"need_mib": 8192, "largest_mib": 6656},
        ),
        LabSession.objects.create(
            course=world["course"],
            template=world["medium"],
            student=students[1],
            state=SessionState.QUEUED,
            reason_code="node.host_memory_too_small",
            reason_params={"need_mib": 8192, "largest_mib": 6656},
        ),
        LabSession.objects.create(
            course=world["course"],
            template=world["small"],
            student=students[2],
            state=SessionState.RUNNING,
            running_at=now,
            access_url="https://labs.example.edu/lab/abc/",
        ),
        LabSession.objects.create(
            course=world["course"],
            template=world["medium"],
            student=students[3],
            state=SessionState.STOPPED,
            running_at=now.replace(microsecond=0) - timedelta(hours=1),
            ended_at=now.replace(microsecond=0),
        ),
    ]
    # A creation time a reader in another zone sees on another day.
    LabSession.objects.filter(pk=made[0].pk).update(created_at=datetime(2026, 11, 30, 23, 30, tzinfo=UTC))
    return made


def by_serializer(sessions) -> list[dict]:
    return [dict(row) for row in SessionSerializer(sessions, many=True).data]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "Europe/London", "Asia/Shanghai", "America/St_Johns"])
def test_rows_answer_what_the_serializer_answers(world, sessions, language, zone):
    listed = session_list_of(institution=world["course"].institution)
    with translation.override(language), timezone.override(zone):
        expected = by_serializer(listed)
        got = session_rows_data(session_rows(listed))
    assert len(got) == len(sessions) == 4
    # The times are left to the API's renderer: the page it writes is DRF's, byte for byte.
    assert JSONRenderer().render(got) == renderers.JSONRenderer().render(expected)
    assert json.loads(JSONRenderer().render(got)) == expected
    assert any(row["reason"] for row in got) and any(row["ended_at"] for row in got)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_list_pages_and_filters_as_before(world, sessions, api, language):
    listed = session_list_of(institution=world["course"].institution)
    headers = {"Accept-Language": language}
    with translation.override(language):
        expected = by_serializer(listed)
    first = api.call("GET", "/api/v1/sessions/?page_size=3", headers=headers).json()
    second = api.call("GET", "/api/v1/sessions/?page_size=3&page=2", headers=headers).json()
    assert first["count"] == 4 and first["previous"] is None and first["next"].endswith("page=2&page_size=3")
    assert first["results"] + second["results"] == expected
    queued = api.call("GET", "/api/v1/sessions/?state=queued", headers=headers).json()
    assert queued["results"] == [row for row in expected if row["state"] == "queued"]
    assert len(queued["results"]) == 2


def test_a_page_is_counted_without_the_joins_its_columns_need(world, sessions, api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        page = api.call("GET", f"/api/v1/sessions/?course={world['course'].pk}&page_size=2").json()
    (count,) = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT COUNT")]
    assert page["count"] == 4 and len(page["results"]) == 2
    assert "labs_labtemplate" not in count and "auth_user" not in count
    # A filter that needs a join still has it.
    assert api.call("GET", f"/api/v1/sessions/?student={world['students'][0].username}").json()["count"] == 1
