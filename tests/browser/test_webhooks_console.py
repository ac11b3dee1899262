"""An operator subscribes the LMS to webhooks, sees the secret once, opens the subscription and
pauses it, in English and in Chinese; both pages pass axe-core and fit 390 px, long URLs included."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from labs.models import InstitutionRole
from tests.browser.test_instructor_console import DESKTOP, Checker, t
from tests.factories import PASSWORD, UserFactory
from webhooks.models import Subscription

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG_URL = "https://moodle.university-with-a-long-name.example.edu/webhook/receiver/npu-lab-portal/events/v1"


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_operator_subscribes_sees_the_secret_once_and_pauses(world, portal_server, browser_page, language):
    operator = UserFactory(username="webhook-op")
    InstitutionRole.objects.create(user=operator, institution=world["course"].institution, role="operator")
    context = browser_page.context.browser.new_context(viewport=DESKTOP)
    context.add_cookies([{"name": "django_language", "value": language, "url": portal_server}])
    page = context.new_page()
    check = Checker(page, language)
    page.goto(portal_server + "/accounts/login/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.goto(portal_server + "/ops/webhooks/")
    expect(page.get_by_role("heading", name=t(language, "Webhooks"), exact=True)).to_be_visible()
    check("ops-webhooks-empty")

    page.get_by_role("button", name=t(language, "Subscribe")).click()  # nothing filled in: refused, nothing made
    expect(page.get_by_role("alert").first).to_be_visible()
    assert not Subscription.objects.exists()

    page.fill("input[name=url]", LONG_URL)
    page.locator("input[name=event_types][value='session.ended']").check()
    page.locator("input[name=event_types][value='usage.recorded']").check()
    page.get_by_role("button", name=t(language, "Subscribe")).click()
    secret = page.locator("code.webhook-secret")
    expect(secret).to_have_text(Subscription.objects.get().secret)
    check("ops-webhooks-secret")

    page.goto(portal_server + "/ops/webhooks/")
    expect(page.locator("code.webhook-secret")).to_have_count(0)  # shown once
    page.get_by_role("link", name=t(language, "Deliveries and settings")).click()
    page.get_by_role("button", name=t(language, "Pause")).click()
    expect(page.locator("dd[data-state]")).to_have_text(t(language, "paused"))
    assert not Subscription.objects.get().active
    check("ops-webhook")
