"""An instructor books a weekly class, is refused one the cluster cannot hold and cancels the first,
in English and in Chinese; the pages pass axe-core and fit a phone (``Checker``, as the console's
other pages)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone, translation
from playwright.sync_api import expect

from labs.models import CourseQuota, Enrollment, Reservation
from labs.services.reservations import slot_label
from tests.browser.test_instructor_console import DESKTOP, Checker, log_in, t
from tests.factories import CARD_MIB, UserFactory, course_with_students

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_instructor_books_a_weekly_class_and_is_refused_one_that_does_not_fit(world, portal_server, browser_page, language):
    course, instructor = world["course"], world["instructor"]
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"extra-{i}", password=UserFactory.build().password) for i in range(36)
    )
    Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role="student") for u in users)  # 40 students
    # Another course is guaranteed seven of the eight cards: one card is left, 16 small labs.
    guard, _, _, _ = course_with_students(0, code="GUARD")
    CourseQuota.objects.filter(course=guard).update(core_percent=700, memory_mib=7 * CARD_MIB, instance_count=112)
    page = browser_page
    page.set_viewport_size(DESKTOP)
    check = Checker(page, language)
    log_in(page, portal_server, instructor.username, language)

    page.goto(f"{portal_server}/courses/{course.pk}/")
    page.get_by_role("link", name=t(language, "Class reservations")).click()
    expect(page.get_by_role("heading", name=t(language, "Class reservations"), exact=True)).to_be_visible()
    expect(page.get_by_text(t(language, "No class is booked."))).to_be_visible()
    check("reservations-empty")

    first = timezone.localdate() + timedelta(days=1)
    page.select_option("#id_template", str(world["small"].pk))
    page.fill("#id_count", "12")
    page.fill("#id_start_time", "14:00")
    page.fill("#id_minutes", "90")
    page.check(f"#id_weekdays_{first.weekday()}")
    page.fill("#id_first_date", first.isoformat())
    page.fill("#id_last_date", (first + timedelta(days=13)).isoformat())
    page.get_by_role("button", name=t(language, "Book"), exact=True).click()
    expect(page.locator(".flash").first).to_be_visible()
    reservation = Reservation.objects.get()
    assert (reservation.count, reservation.slots.count()) == (12, 2)
    expect(page.locator("[data-testid=slots] tbody tr")).to_have_count(2)
    check("reservations-booked")

    # 30 at another time: one card holds 16 of them beside GUARD's guarantee.
    page.select_option("#id_template", str(world["small"].pk))
    page.fill("#id_count", "30")
    page.fill("#id_start_time", "10:00")
    page.fill("#id_dates", (first + timedelta(days=2)).isoformat())
    page.get_by_role("button", name=t(language, "Book"), exact=True).click()
    refusal = page.locator("[data-testid=reservation-refused]")
    expect(refusal).to_be_visible()
    words = {"en": "needs 30 instances of 5 % / 4 GiB; the cluster can hold 16 beside", "zh-hans": "集群只能容纳 16 个"}
    expect(refusal).to_contain_text(words[language])
    named = {"en": "In the way then: GUARD's guarantee holds 700 % / 448 GiB.", "zh-hans": "GUARD 的保障占用 700 % / 448 GiB"}
    expect(refusal).to_contain_text(named[language])
    assert Reservation.objects.count() == 1
    check("reservation-refused")

    page.get_by_role("link", name=t(language, "Cancel…")).click()
    expect(page.get_by_role("heading", name=t(language, "Cancel a reservation"), exact=True)).to_be_visible()
    check("reservation-cancel")
    page.check("input[name=confirm]")
    page.get_by_role("button", name=t(language, "Cancel the reservation")).click()
    expect(page.get_by_text(t(language, "No class is booked."))).to_be_visible()
    assert Reservation.objects.get().cancelled_at is not None


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_teacher_books_a_term_already_under_way_and_it_starts_at_the_next_meeting(world, portal_server, browser_page, language):
    course, instructor = world["course"], world["instructor"]
    page = browser_page
    page.set_viewport_size(DESKTOP)
    check = Checker(page, language)
    log_in(page, portal_server, instructor.username, language)
    page.goto(f"{portal_server}/courses/{course.pk}/reservations/")
    expect(page.get_by_test_id("required-note")).to_have_text(t(language, "Fields marked * are required."))
    for name in ("Sessions", "Class starts at", "Length (minutes)"):
        box = page.get_by_label(t(language, name))
        expect(box).to_have_attribute("aria-required", "true")
        expect(box).to_have_attribute("required", "")

    # The term began on the Monday two weeks before this one and meets every day at 23:59 (a time
    # still to come today, whenever the test runs): booked now, it starts with today's class.
    today = timezone.localdate()
    began = today - timedelta(days=14 + today.weekday())
    page.select_option("#id_template", str(world["small"].pk))
    page.fill("#id_count", "4")
    page.fill("#id_start_time", "23:59")
    page.fill("#id_minutes", "1")
    for weekday in range(7):
        page.check(f"#id_weekdays_{weekday}")
    page.fill("#id_first_date", began.isoformat())
    page.fill("#id_last_date", (today + timedelta(days=6)).isoformat())
    page.get_by_role("button", name=t(language, "Book"), exact=True).click()
    expect(page.locator(".flash").first).to_be_visible()

    reservation = Reservation.objects.get()
    slots = list(reservation.slots.order_by("starts_at"))
    assert len(slots) == 7 and slots[0].starts_at > timezone.now()  # today's class and the six after it
    assert reservation.first_date == timezone.localtime(slots[0].starts_at).date()
    with translation.override(language):
        first = slot_label(slots[0].starts_at, slots[0].ends_at)
    expect(page.locator(".flash").first).to_contain_text({"en": "first meeting: ", "zh-hans": "第一次上课："}[language] + first)
    expect(page.locator("[data-testid=slots] tbody tr")).to_have_count(7)
    check("reservation-under-way-booked")
