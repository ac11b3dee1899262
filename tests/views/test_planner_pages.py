"""The planner's pages through the ASGI application: who may see them (a student is refused, an
instructor sees their own course's, an operator the cluster's), the CSV file, the what-if answer
and bad input answered with the field's message."""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, time, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from labs.selectors.planner import monday_of
from tests.asgi_client import AsgiClient
from tests.factories import CourseFactory, CourseQuotaFactory, EnrollmentFactory, InstitutionFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def page(course) -> str:
    return f"/courses/{course.pk}/planner/"


def next_tuesday() -> str:
    return (monday_of(timezone.localdate()) + timedelta(weeks=1, days=1)).isoformat()


def platform_operator():
    operator = UserFactory(username="platform-op")
    operator.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    return operator


def test_a_student_is_refused_both_pages(world):
    student = AsgiClient(user=world["students"][0])
    assert student.get(page(world["course"])).status_code == 404
    assert student.get("/ops/planner/").status_code == 404


def test_an_instructor_sees_their_course_and_not_another(world):
    other = CourseFactory(institution=InstitutionFactory(slug="elsewhere"), code="OTHER1")
    CourseQuotaFactory(course=other)
    teacher = AsgiClient(user=world["instructor"])
    response = teacher.get(page(world["course"]))
    assert response.status_code == 200
    assert 'id="planner-heatmap"' in response.text and 'id="planner-data"' in response.text
    assert teacher.get(page(other)).status_code == 404
    assert teacher.get("/ops/planner/").status_code == 404


def test_the_page_says_how_many_hours_do_not_fit_and_which_is_the_busiest(world):
    teacher = AsgiClient(user=world["instructor"])
    assert "0 hours do not fit." in teacher.get(page(world["course"])).text
    # Another course guaranteed the whole node again: every hour is short, twice the cluster taken.
    CourseQuotaFactory(course=CourseFactory(institution=InstitutionFactory(slug="elsewhere"), code="OTHER1"))
    text = teacher.get(page(world["course"])).text
    assert "168 hours do not fit." in text and ", 200 % taken." in text


def test_an_assistant_sees_the_course_planner(world):
    assistant = UserFactory(username="ta")
    EnrollmentFactory(user=assistant, course=world["course"], role="assistant")
    assert AsgiClient(user=assistant).get(page(world["course"])).status_code == 200


def test_an_operator_sees_the_whole_cluster_and_can_try_any_course(world):
    other = CourseFactory(institution=InstitutionFactory(slug="elsewhere"), code="OTHER1")
    CourseQuotaFactory(course=other)
    response = AsgiClient(user=platform_operator()).get("/ops/planner/")
    assert response.status_code == 200
    assert "OTHER1" in response.text and world["course"].code in response.text  # the what-if's course choice


def test_the_plan_downloads_as_csv(world):
    response = AsgiClient(user=world["instructor"]).get(page(world["course"]) + "?weeks=2&format=csv")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 2 * 168 * 2


def test_a_what_if_is_answered_on_the_page(world):
    query = {
        "class-template": world["small"].pk,
        "class-count": 4,
        "class-weekday": 1,
        "class-start": "10:00",
        "class-end": "12:00",
        "class-first": next_tuesday(),
        "class-last": next_tuesday(),
    }
    response = AsgiClient(user=world["instructor"]).get(page(world["course"]), params=query)
    assert response.status_code == 200
    assert 'data-verdict="fits"' in response.text


def test_a_class_too_large_for_its_quota_does_not_fit(world):
    query = {
        "class-template": world["medium"].pk,
        "class-count": 200,
        "class-weekday": 1,
        "class-start": "10:00",
        "class-end": "11:00",
        "class-first": next_tuesday(),
        "class-last": next_tuesday(),
    }
    response = AsgiClient(user=world["instructor"]).get(page(world["course"]), params=query)
    assert 'data-verdict="does_not_fit"' in response.text


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("class-end", "09:00", "A class must end after it starts."),
        ("class-count", "0", "Ensure this value is greater than or equal to 1."),
        ("class-last", "the day before", "The last date is before the first."),
        ("class-first", "2000-01-01", "Choose a date from a year ago to two years ahead."),
    ],
)
def test_bad_what_if_input_is_answered_with_the_fields_message(world, field, value, message):
    query = {
        "class-template": world["small"].pk,
        "class-count": 4,
        "class-weekday": 1,
        "class-start": "10:00",
        "class-end": "12:00",
        "class-first": next_tuesday(),
        "class-last": next_tuesday(),
    }
    query[field] = (date.fromisoformat(next_tuesday()) - timedelta(days=1)).isoformat() if value == "the day before" else value
    response = AsgiClient(user=world["instructor"]).get(page(world["course"]), params=query)
    assert response.status_code == 200
    assert message in response.text
    assert "data-verdict" not in response.text


def test_bad_weeks_are_refused_with_a_message(world):
    response = AsgiClient(user=world["instructor"]).get(page(world["course"]) + "?weeks=99")
    assert "Ensure this value is less than or equal to 26." in response.text
    assert 'id="planner-data"' not in response.text


def test_the_page_reads_in_as_many_queries_whatever_the_number_of_bookings(world):
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from labs.services.reservations import reservation_book

    client = Client()
    client.force_login(world["instructor"])
    monday = monday_of(timezone.localdate()) + timedelta(weeks=1)
    zone = timezone.get_default_timezone()

    def book(day: int) -> None:
        start = timezone.make_aware(datetime.combine(monday + timedelta(days=day), time(10)), zone)
        reservation_book(course=world["course"], template=world["small"], count=2, slots=[(start, start + timedelta(hours=1))])

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(page(world["course"]) + f"?first={monday.isoformat()}").status_code == 200
        return len(captured)

    book(0)
    one = queries()
    for day in range(1, 5):
        book(day)
    assert queries() == one


def test_an_institutions_operator_tries_classes_only_for_its_own_courses(world):
    from labs.models import InstitutionRole

    other = CourseFactory(institution=InstitutionFactory(slug="elsewhere"), code="OTHER1")
    CourseQuotaFactory(course=other)
    operator = UserFactory(username="uni-op")
    InstitutionRole.objects.create(user=operator, institution=world["course"].institution, role="operator")
    client = AsgiClient(user=operator)
    response = client.get("/ops/planner/")
    assert response.status_code == 200
    assert world["course"].code in response.text and "OTHER1" not in response.text
    refused = client.get("/ops/planner/", params={"class-course": other.pk, "class-count": 1})
    assert "Select a valid choice." in refused.text and "data-verdict" not in refused.text
