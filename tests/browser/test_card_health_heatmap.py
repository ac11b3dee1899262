"""An operator watches a card warm up on the heatmap, live, as its node's agent reports it; the
page passes axe-core and fits 390 px."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from labs.models import Card
from labs.services.agents import node_inventory_sync
from tests.browser.test_instructor_console import DESKTOP, Checker, t
from tests.browser.test_session_card import off_the_browser_loop
from tests.factories import PASSWORD, UserFactory
from tests.reconcile.conftest import TOKEN, RunningAgent

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_card_warming_up_shows_on_the_heatmap_live(world, portal_server, browser_page, settings):
    settings.LAB_AGENT_TOKEN = TOKEN
    agent = RunningAgent(world["node"].name)
    world["node"].agent_url = agent.url
    world["node"].save(update_fields=["agent_url"])
    try:
        operator = UserFactory(username="platform-op")
        operator.user_permissions.add(Permission.objects.get(codename="operate_platform"))
        page = browser_page.context.browser.new_context(viewport=DESKTOP).new_page()
        page.goto(portal_server + "/accounts/login/")
        page.fill("#id_username", operator.username)
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.get_by_role("link", name=t("en", "Operations")).click()
        expect(page.locator("body[data-live=yes]")).to_have_count(1)
        card = page.locator(f"[data-card='{Card.objects.get(node=world['node'], index=2).pk}']")
        expect(card.locator("[data-field=temperature]")).to_have_text("–")

        agent.driver.register("busy", card_index=2, core_percent=50, memory_mib=8192)
        agent.driver.set_demand("busy", 100)
        reading = agent.driver.inventory()[2]
        off_the_browser_loop(node_inventory_sync, node=world["node"])

        expect(card.locator("[data-field=temperature]")).to_have_text(str(reading.temperature_celsius), timeout=15_000)
        expect(card.locator("[data-field=power]")).to_have_text(f"{reading.power_milliwatts / 1000:.1f}")
        Checker(page, "en")("ops-cluster-health")
    finally:
        agent.stop()
