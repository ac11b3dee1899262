"""An instructor sets up a course by following the "Next" link each step ends with: course →
quota → template → roster, until the course page says students can launch; in English and Chinese."""

from __future__ import annotations

import pytest
from django.utils import translation
from playwright.sync_api import expect

from labs.models import Course, InstitutionRole
from tests.browser.test_instructor_console import Checker
from tests.factories import PASSWORD, UserFactory, node_with_cards

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def t(language: str, text: str) -> str:
    with translation.override(language):
        return translation.gettext(text)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_instructor_follows_the_next_links_from_a_new_course_to_ready(world, portal_server, browser_page, language):
    institution = world["course"].institution
    teacher = UserFactory(username="prof")
    InstitutionRole.objects.create(user=teacher, institution=institution, role="instructor")
    node_with_cards("n2")  # room for a guarantee beside the world's course, which holds the first node
    page = browser_page
    page.goto(portal_server + "/accounts/login/")
    page.fill("#id_username", "prof")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    with page.expect_navigation():
        page.select_option("select[name=language]", language)
    expect(page.locator("html")).to_have_attribute("lang", language)

    # Course: created, and the quota page is next.
    page.goto(portal_server + "/teach/courses/new/")
    page.fill("#id_code", "AI401")
    page.fill("#id_title", "Guided")
    page.fill("#id_term", "2027 Spring")
    page.get_by_role("button", name=t(language, "Create course")).click()
    course = Course.objects.get(code="AI401")
    expect(page.get_by_role("heading", name=t(language, "Quota"), exact=True)).to_be_visible()

    # Quota: saved, the course page lists what is left, and the message links to templates.
    page.fill("#id_instance_count", "4")
    page.fill("#id_core_percent", "40")
    page.fill("#id_memory_mib", "16")
    page.fill("#id_sessions_per_student", "1")
    page.fill("#id_max_session_minutes", "60")
    page.get_by_role("button", name=t(language, "Save quota")).click()
    checklist = page.get_by_test_id("setup-checklist")
    expect(checklist.locator("li")).to_have_count(2)
    expect(checklist.get_by_role("link", name=t(language, "Offer at least one template."))).to_be_visible()
    expect(checklist.get_by_role("link", name=t(language, "Enrol at least one student."))).to_be_visible()
    expect(page.locator(".flash.success")).to_contain_text(t(language, "Quota saved."))
    Checker(page, language)("course-checklist")
    page.get_by_role("link", name=t(language, "Next: offer templates")).click()
    expect(page).to_have_url(f"{portal_server}/courses/{course.pk}/templates/")

    # Template: offered, and the roster is next.
    page.select_option("#attach-template", str(world["small"].pk))
    page.get_by_role("button", name=t(language, "Offer it")).click()
    page.get_by_role("link", name=t(language, "Next: enrol students")).click()
    expect(page).to_have_url(f"{portal_server}/courses/{course.pk}/roster/")

    # Roster: a student added, and the course is ready.
    page.fill("#id_identifier", world["students"][0].username)
    page.get_by_role("button", name=t(language, "Add"), exact=True).click()
    page.get_by_role("link", name=t(language, "Ready: students can launch")).click()
    expect(page).to_have_url(f"{portal_server}/courses/{course.pk}/")
    expect(page.get_by_test_id("setup-ready")).to_have_text(t(language, "Ready: students can launch."))
    expect(page.get_by_test_id("setup-checklist")).to_have_count(0)
