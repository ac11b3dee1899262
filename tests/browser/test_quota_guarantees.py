"""The quota page of a second course shows, in both languages, how much of the cluster the other
courses already guarantee and who holds it, and a guarantee past what is left is refused naming
the course; the page passes axe-core and fits 390 px."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from labs.models import CourseQuota, InstitutionRole
from tests.browser.test_every_page import signed_in
from tests.browser.test_instructor_console import Checker, t
from tests.factories import CourseFactory, EnrollmentFactory

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_quota_page_shows_the_clusters_guaranteed_share_and_who_holds_it(world, portal_server, browser_page, language):
    ai101 = world["course"]  # guarantees the whole 8-card node: 128 instances, 800 %, 512 GiB
    ai101.code = "AI101"
    ai101.save(update_fields=["code"])
    course = CourseFactory(institution=ai101.institution, code="AI102")
    EnrollmentFactory(user=world["instructor"], course=course, role="instructor")
    InstitutionRole.objects.get_or_create(user=world["instructor"], institution=ai101.institution, role="instructor")

    page = signed_in(browser_page.context.browser, portal_server, world["instructor"].username, language)
    page.goto(f"{portal_server}/courses/{course.pk}/quota/")
    expect(page.locator("html")).to_have_attribute("lang", language)
    expect(page.get_by_role("heading", name=t(language, "Other courses already guarantee"))).to_be_visible()
    expect(page.get_by_test_id("held-cluster")).to_contain_text(re.compile(r"128\D+128"))
    expect(page.get_by_test_id("held-cluster")).to_contain_text(re.compile(r"800\D+800"))
    expect(page.get_by_test_id("held-courses")).to_contain_text("AI101")
    Checker(page, language)("quota-guaranteed")

    page.fill("#id_instance_count", "32")
    page.fill("#id_core_percent", "0")
    page.fill("#id_memory_mib", "0")
    page.get_by_role("button", name=t(language, "Save quota")).click()
    expect(page.locator(".field.invalid .error").first).to_contain_text("AI101")
    assert not CourseQuota.objects.filter(course=course).exists()
