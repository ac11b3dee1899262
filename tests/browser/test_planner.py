"""The term capacity planner in Chromium, in English and Chinese: an instructor opens the course's
planner, the heatmap is drawn, a what-if class is answered with the booking it collides with; an
operator plans the cluster and tries a class for any course. Each page passes axe-core and fits
390 px."""

from __future__ import annotations

from datetime import datetime, time, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone
from playwright.sync_api import expect

from labs.selectors.planner import monday_of
from labs.services.reservations import reservation_book
from tests.browser.test_instructor_console import DESKTOP, Checker, log_in, t
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def next_tuesday():
    return monday_of(timezone.localdate()) + timedelta(weeks=1, days=1)


def at(day, hour: int) -> datetime:
    return datetime.combine(day, time(hour), tzinfo=timezone.get_default_timezone())


def try_a_class(page, world, *, course=None) -> None:
    if course is not None:
        page.select_option("#id_class-course", str(course.pk))
    page.select_option("#id_class-template", str(world["small"].pk))
    page.fill("#id_class-count", "4")
    page.select_option("#id_class-weekday", "1")
    page.fill("#id_class-start", "10:00")
    page.fill("#id_class-end", "12:00")
    page.fill("#id_class-first", next_tuesday().isoformat())
    page.fill("#id_class-last", next_tuesday().isoformat())
    page.get_by_test_id("what-if-form").get_by_role("button").click()


def heatmap_drawn(page, cells: int) -> None:
    heatmap = page.locator("#planner-heatmap")
    expect(heatmap).to_have_attribute("data-ready", "yes")
    expect(heatmap).to_have_attribute("data-cells", str(cells))
    expect(heatmap.locator("svg")).to_have_count(1)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_instructor_sees_the_week_and_asks_whether_a_class_fits(world, portal_server, browser_page, language):
    course = world["course"]
    reservation_book(course=course, template=world["medium"], count=2, slots=[(at(next_tuesday(), 11), at(next_tuesday(), 12))])
    page = browser_page
    page.set_viewport_size(DESKTOP)
    check = Checker(page, language)
    log_in(page, portal_server, world["instructor"].username, language)
    page.goto(f"{portal_server}/courses/{course.pk}/")
    page.get_by_role("link", name=t(language, "Planner"), exact=True).click()
    expect(page.get_by_role("heading", name=t(language, "Term capacity planner"))).to_be_visible()
    heatmap_drawn(page, 168)
    check("planner-course")

    page.fill("#id_first", next_tuesday().isoformat())
    page.fill("#id_weeks", "2")
    page.get_by_test_id("plan-form").get_by_role("button").click()
    heatmap_drawn(page, 2 * 168)

    try_a_class(page, world)
    verdict = page.get_by_test_id("what-if-verdict")
    expect(verdict).to_have_attribute("data-verdict", "fits")
    expect(verdict).to_contain_text(t(language, "Fits."))
    collisions = page.get_by_test_id("what-if-collisions")
    expect(collisions.locator("tbody tr")).to_have_count(1)
    booking = t(language, "%(course)s: %(count)s × %(template)s") % {"course": course.code, "count": 2, "template": "medium"}
    expect(collisions).to_contain_text(booking)
    check("planner-what-if")


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_operator_plans_the_cluster_and_tries_a_class_for_a_course(world, portal_server, browser_page, language):
    operator = UserFactory(username="platform-op")
    operator.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    page = browser_page
    page.set_viewport_size(DESKTOP)
    check = Checker(page, language)
    log_in(page, portal_server, operator.username, language)
    page.goto(f"{portal_server}/ops/")
    page.get_by_role("link", name=t(language, "Planner"), exact=True).click()
    heatmap_drawn(page, 168)
    check("planner-ops")

    world["course"].quota.__class__.objects.filter(course=world["course"]).update(instance_count=2)
    try_a_class(page, world, course=world["course"])
    expect(page.get_by_test_id("what-if-verdict")).to_have_attribute("data-verdict", "does_not_fit")
    expect(page.get_by_test_id("what-if-no-collisions")).to_be_visible()
    check("planner-ops-what-if")
