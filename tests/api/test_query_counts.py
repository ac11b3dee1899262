"""List endpoints read in a fixed number of queries, however many rows they list."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from labs.models import Course, LabSession
from tests.factories import UserFactory


def queries_for(api, url: str) -> int:
    api.call("GET", url)  # the token's first use of the minute also writes its last-used time
    with CaptureQueriesContext(connection) as queries:
        assert api.call("GET", url).status_code == 200
    return len(queries.captured_queries)


def add_sessions(world, n: int) -> None:
    LabSession.objects.bulk_create(
        LabSession(student=UserFactory(), course=world["course"], template=world["small"], secret="x") for _ in range(n)
    )


def test_the_session_list_does_not_grow_with_its_rows(api, world):
    add_sessions(world, 2)
    few = queries_for(api, "/api/v1/sessions/")
    add_sessions(world, 20)
    assert queries_for(api, "/api/v1/sessions/") == few


def test_the_course_list_and_roster_do_not_grow_with_their_rows(api, world):
    course_list, roster = queries_for(api, "/api/v1/courses/"), queries_for(api, f"/api/v1/courses/{world['course'].pk}/roster/")
    Course.objects.bulk_create(
        Course(institution=world["course"].institution, code=f"X{i}", title="x", term="t") for i in range(10)
    )
    world["course"].enrollments.bulk_create(
        world["course"].enrollments.model(user=UserFactory(), course=world["course"]) for _ in range(10)
    )
    assert queries_for(api, "/api/v1/courses/") == course_list
    assert queries_for(api, f"/api/v1/courses/{world['course'].pk}/roster/") == roster


def test_the_session_list_reads_only_the_columns_it_answers_with(api, world):
    add_sessions(world, 3)
    api.call("GET", "/api/v1/sessions/")
    with CaptureQueriesContext(connection) as queries:
        assert api.call("GET", "/api/v1/sessions/").status_code == 200
    [listing] = [q["sql"] for q in queries.captured_queries if '"labs_labsession"."reason_params"' in q["sql"]]
    # Not the lab's secret, the driver's reference or the student's password hash: an LMS polling
    # a class's start reads every row again and again.
    for unread in ('"labs_labsession"."secret"', '"labs_labsession"."driver_ref"', '"auth_user"."password"'):
        assert unread not in listing
