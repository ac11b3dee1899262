"""Class reservations in the instructor console: booking weekly or on single dates, a refusal
with the reason in the reader's language and nothing written, cancelling after a confirmation."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labs.models import AuditEvent, Reservation, ReservationSlot
from labs.services.reservations import reservation_book, reservations_enforce, slot_label
from labs.services.sessions import session_launch

pytestmark = pytest.mark.django_db


def logged_in(user, language: str = "en") -> Client:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    return client


def page(course) -> str:
    return f"/courses/{course.pk}/reservations/"


def next_weekday(weekday: int) -> date:
    today = timezone.localdate()
    return today + timedelta(days=(weekday - today.weekday()) % 7 or 7)


def booking(world, **overrides):
    data = {"template": world["small"].pk, "count": 4, "start_time": "14:00", "minutes": 90}
    data.update(overrides)
    return data


def test_an_instructor_books_a_weekly_class_until_the_last_date(world):
    first = next_weekday(1)  # a Tuesday
    response = logged_in(world["instructor"]).post(
        page(world["course"]),
        booking(world, weekdays=["1", "3"], first_date=first.isoformat(), last_date=(first + timedelta(days=13)).isoformat()),
        follow=True,
    )
    reservation = Reservation.objects.get()
    assert (reservation.count, reservation.weekdays, reservation.minutes) == (4, [1, 3], 90)
    slots = list(reservation.slots.all())
    assert len(slots) == 4  # two Tuesdays, two Thursdays
    assert [timezone.localtime(s.starts_at).strftime("%a %H:%M") for s in slots] == ["Tue 14:00", "Thu 14:00"] * 2
    first_meeting = slot_label(slots[0].starts_at, slots[0].ends_at)
    assert f"Booked 4 sessions of small for 4 classes; first meeting: {first_meeting}." in response.content.decode()
    assert AuditEvent.objects.filter(action="reservation.create").count() == 1


def test_a_booking_on_single_dates_is_listed_with_what_was_pre_started_and_claimed(world):
    soon = timezone.now() + timedelta(minutes=5)
    reservation_book(course=world["course"], template=world["small"], count=2, slots=[(soon, soon + timedelta(minutes=30))])
    reservations_enforce()
    session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    tomorrow = (timezone.localdate() + timedelta(days=2)).isoformat()
    logged_in(world["instructor"]).post(page(world["course"]), booking(world, count=1, dates=f"{tomorrow}, {tomorrow}"))
    assert Reservation.objects.count() == 2 and ReservationSlot.objects.count() == 2

    body = logged_in(world["instructor"]).get(page(world["course"])).content.decode()
    rows = body.split('data-testid="slots"')[1].split("</table>")[0]
    assert rows.count("<tr>") == 3  # the heading and two classes
    first = rows.split("<tr>")[2]
    assert ">2</td>" in first and ">1</td>" in first  # two pre-started, one claimed


@pytest.mark.parametrize(
    ("language", "words"),
    [("en", "the cluster can hold 128 beside"), ("zh-hans", "除去其他预约和保障后，集群只能容纳 128 个")],
)
def test_a_class_the_cluster_cannot_hold_is_refused_in_the_reader_s_language_and_nothing_is_written(world, language, words):
    from labs.models import Enrollment
    from tests.factories import UserFactory

    for i in range(200):  # a roster of 200, more than the server's 128 places
        Enrollment.objects.create(course=world["course"], user=UserFactory(username=f"extra-{i}"), role="student")
    tomorrow = (timezone.localdate() + timedelta(days=1)).isoformat()
    response = logged_in(world["instructor"], language).post(page(world["course"]), booking(world, count=200, dates=tomorrow))
    assert response.status_code == 200
    assert words in response.content.decode()
    assert not Reservation.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "Tick the weekdays of the class, or give single dates."),
        ({"weekdays": ["1"], "last_date": "2030-01-01"}, "A weekly class needs its first date."),
        ({"weekdays": ["1"], "first_date": "2030-01-10", "last_date": "2030-01-01"}, "The last date is before the first."),
        ({"dates": "2030-02-30"}, "2030-02-30 is not a date like 2026-03-03."),
        ({"dates": "2020-01-07"}, "2020-01-07 is in the past: a single date must be today or later."),
        ({"dates": "2030-01-07", "count": 0}, "Ensure this value is greater than or equal to 1."),
        ({"dates": "2030-01-07", "count": 5}, "5 sessions is more than the 4 students enrolled"),
        ({"dates": "2030-01-07", "weekdays": ["9"]}, "Select a valid choice."),
    ],
)
def test_bad_input_is_explained_and_nothing_is_written(world, overrides, message):
    response = logged_in(world["instructor"]).post(page(world["course"]), booking(world, **overrides))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Reservation.objects.exists()


def test_a_weekly_class_without_a_last_date_ends_with_the_course(world):
    course = world["course"]
    first = next_weekday(0)
    course.ends_on = first + timedelta(days=7)
    course.save(update_fields=["ends_on"])
    logged_in(world["instructor"]).post(page(course), booking(world, weekdays=["0"], first_date=first.isoformat()))
    assert Reservation.objects.get().slots.count() == 2


def test_cancelling_asks_for_confirmation_then_removes_the_classes_to_come(world):
    start = timezone.now() + timedelta(days=1)
    reservation = reservation_book(
        course=world["course"], template=world["small"], count=2, slots=[(start, start + timedelta(hours=1))]
    )
    client = logged_in(world["instructor"])
    cancel = f"{page(world['course'])}{reservation.pk}/cancel/"
    assert client.post(cancel, {}).status_code == 200
    assert Reservation.objects.get().cancelled_at is None
    client.post(cancel, {"confirm": "yes"})
    assert Reservation.objects.get().cancelled_at is not None and not ReservationSlot.objects.exists()
    assert client.get(cancel).status_code == 404  # already cancelled


def test_the_page_s_query_count_does_not_grow_with_bookings(world):
    def queries() -> int:
        client = logged_in(world["instructor"])
        with CaptureQueriesContext(connection) as captured:
            assert client.get(page(world["course"])).status_code == 200
        return len(captured)

    start = timezone.now() + timedelta(days=1)
    reservation_book(course=world["course"], template=world["small"], count=1, slots=[(start, start + timedelta(hours=1))])
    few = queries()
    for day in range(2, 8):
        at = start + timedelta(days=day)
        reservation_book(course=world["course"], template=world["medium"], count=1, slots=[(at, at + timedelta(hours=1))])
    assert queries() == few
