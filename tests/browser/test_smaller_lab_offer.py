"""A student whose big lab waits for the card sees, live, that a smaller lab can start now, switches
in one click and the smaller lab starts, without a reload, in English and in Chinese; the offer is
there again on a reload."""

from __future__ import annotations

import pytest
from django.utils import translation
from playwright.sync_api import expect

from labs.models import LabSession
from labs.presentation import smaller_offer_text
from tests.browser.test_instructor_console import log_in, t
from tests.conftest import wait_for
from tests.factories import smaller_lab_world

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_queued_student_switches_to_the_smaller_lab_offered_and_it_starts(portal_server, start_worker, browser_page, language):
    w = smaller_lab_world()
    start_worker(LAB_SIMULATOR_DELAY_SECONDS="0.5")
    from labs.services.sessions import session_launch

    filler = session_launch(student=w["other_students"][0], course=w["other_course"], template=w["filler"])
    wait_for(lambda: LabSession.objects.get(pk=filler.pk).state == "running", message="the other course's lab running")
    with translation.override(language):
        offer = smaller_offer_text({"template": w["medium"].pk, "core_percent": 30, "memory_mib": 16 * 1024, "cards": 1})

    page = browser_page
    log_in(page, portal_server, w["students"][0].username, language)
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    page.evaluate("window.__notReloaded = true")
    page.locator("form.js-launch", has_text="big").get_by_role("button").click()
    big = page.locator("#sessions article.session").first
    expect(big).to_have_attribute("data-state", "queued")
    expect(big.locator("[data-field=smaller_offer_text]")).to_have_text(offer, timeout=30_000)
    queued = LabSession.objects.get(student=w["students"][0], template=w["big"])
    assert queued.reason_code.startswith("card.")

    page.reload()  # the offer is on the page as first drawn, too
    big = page.locator(f"article.session[data-session-id='{queued.pk}']")
    expect(big.locator("[data-field=smaller_offer_text]")).to_have_text(offer)
    page.evaluate("window.__notReloaded = true")

    big.get_by_role("button", name=t(language, "Switch to it")).click()
    expect(big).to_have_attribute("data-state", "stopped", timeout=15_000)
    expect(big.locator("[data-role=smaller]")).to_be_hidden()
    with translation.override(language):
        withdrawn = LabSession.objects.get(pk=queued.pk).reason
    expect(big.locator("[data-field=reason]")).to_have_text(withdrawn)
    started = LabSession.objects.get(student=w["students"][0], template=w["medium"])
    card = page.locator(f"article.session[data-session-id='{started.pk}']")
    expect(card).to_have_attribute("data-state", "running", timeout=30_000)
    expect(card.get_by_role("link", name=t(language, "Open"))).to_be_visible()
    assert page.evaluate("window.__notReloaded") is True, "the page reloaded"
