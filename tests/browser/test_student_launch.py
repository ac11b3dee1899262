"""A student logs in, launches, sees the session reach Running without a reload, and stops it."""

import pytest
from playwright.sync_api import expect

from labs.models import Allocation, LabSession
from tests.conftest import wait_for
from tests.factories import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def log_in(page, base_url, username, lands_on="Launch a lab"):
    page.goto(base_url + "/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.get_by_role("heading", name=lands_on)).to_be_visible()


def test_a_student_launches_sees_running_live_and_stops(world, portal_server, start_worker, browser_page):
    from tests.factories import UserFactory

    student = UserFactory(username="ada")
    world["course"].enrollments.create(user=student, role="student")
    start_worker(LAB_SIMULATOR_DELAY_SECONDS="1.5")
    page = browser_page
    log_in(page, portal_server, "ada")
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    page.evaluate("window.__notReloaded = true")

    page.locator("form.js-launch", has_text="small").get_by_role("button", name="Launch").click()
    card = page.locator("#sessions article.session").first
    expect(card).to_have_attribute("data-state", "running", timeout=30_000)
    expect(card.get_by_role("link", name="Open")).to_be_visible()
    assert page.evaluate("window.__notReloaded") is True, "the page reloaded"
    session = LabSession.objects.get(student=student)
    assert card.get_attribute("data-session-id") == str(session.pk)
    assert card.get_by_role("link", name="Open").get_attribute("href") == session.access_url

    card.get_by_role("button", name="Stop").click()
    expect(card).to_have_attribute("data-state", "stopped", timeout=30_000)
    expect(card.locator("[data-field=reason]")).to_have_text("stopped by ada")
    expect(card.get_by_role("button", name="Stop")).to_be_hidden()
    assert page.evaluate("window.__notReloaded") is True
    assert Allocation.objects.get(session=session).released_at is not None


def test_a_queued_student_sees_why_and_starts_live_when_the_instructor_stops_another(
    world, portal_server, start_worker, browser_page
):
    from labs.services.sessions import session_launch

    world["course"].quota.instance_count = 1
    world["course"].quota.save(update_fields=["instance_count"])
    start_worker(LAB_SIMULATOR_DELAY_SECONDS="0.5")
    first, second = world["students"][:2]
    blocker = session_launch(student=first, course=world["course"], template=world["small"])
    wait_for(lambda: LabSession.objects.get(pk=blocker.pk).state == "running", message="the first session running")

    page = browser_page
    log_in(page, portal_server, second.username)
    page.locator("form.js-launch", has_text="small").get_by_role("button", name="Launch").click()
    card = page.locator("#sessions article.session").first
    expect(card).to_have_attribute("data-state", "queued")
    expect(card.locator("[data-field=reason]")).to_have_text("course quota: 1 of 1 instances in use", timeout=15_000)

    teacher = page.context.browser.new_context().new_page()
    log_in(teacher, portal_server, world["instructor"].username, lands_on="Courses you teach")
    teacher.get_by_role("link", name=world["course"].code, exact=False).click()
    expect(teacher.locator("[data-testid=students]")).to_have_text(str(len(world["students"])))
    expect(teacher.locator("[data-testid=use-instances]")).to_have_text("1")
    row = teacher.locator(f"tr[data-session-id='{blocker.pk}']")
    expect(row).to_have_attribute("data-state", "running")
    teacher.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Stop").click()

    expect(card).to_have_attribute("data-state", "running", timeout=30_000)
    assert LabSession.objects.get(pk=blocker.pk).reason == f"stopped by {world['instructor'].username}"
    expect(row).to_have_count(0)  # ended sessions leave the instructor's open list live
