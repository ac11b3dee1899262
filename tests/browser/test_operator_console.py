"""An operator watches a card fill up live, drains its node, marks a card unhealthy and finds both
in the audit log, in English and in Chinese; every page passes axe-core and fits 390 px."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from labs.models import AllowedImage, AuditEvent, Card, LabTemplate, Node
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.browser.test_instructor_console import DESKTOP, Checker, t
from tests.browser.test_session_card import off_the_browser_loop
from tests.factories import PASSWORD, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def launch_and_place(world, student_index: int) -> None:
    session_launch(student=world["students"][student_index], course=world["course"], template=world["medium"])
    allocation_pass()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_an_operator_sees_cards_fill_live_drains_a_node_and_marks_a_card(world, portal_server, browser_page, language):
    operator = UserFactory(username="platform-op")
    operator.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    browser = browser_page.context.browser
    context = browser.new_context(viewport=DESKTOP)
    context.add_cookies([{"name": "django_language", "value": language, "url": portal_server}])
    page = context.new_page()
    check = Checker(page, language)
    page.goto(portal_server + "/accounts/login/")
    page.fill("#id_username", operator.username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.get_by_role("link", name=t(language, "Operations")).click()
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    page.evaluate("window.__notReloaded = true")

    first = page.locator("[data-card]").first
    expect(first.locator("[data-field=instances]")).to_have_text("0/16")
    off_the_browser_loop(launch_and_place, world=world, student_index=0)
    off_the_browser_loop(launch_and_place, world=world, student_index=1)
    expect(first.locator("[data-field=instances]")).to_have_text("2/16", timeout=15_000)
    expect(first.locator("[data-field=core]")).to_have_text("20 %")
    assert page.evaluate("window.__notReloaded") is True, "the page reloaded"
    check("ops-cluster")

    # Drain the node: it takes nothing new, its two sessions go on
    node = world["node"]
    page.get_by_role("link", name=t(language, "Drain…")).click()
    page.fill("#id_reason", "firmware update, ticket 4711")
    check("ops-drain")
    page.get_by_role("checkbox").check()
    page.get_by_role("button", name=t(language, "Confirm")).click()
    expect(page.locator(f"[data-node='{node.name}'] .badge").first).to_have_text(t(language, "drained"))
    assert Node.objects.get(pk=node.pk).drained

    # Mark a card unhealthy from its page
    card = Card.objects.get(node=node, index=0)
    page.goto(f"{portal_server}/ops/cards/{card.pk}/")
    expect(page.get_by_role("cell", name=world["students"][0].username)).to_be_visible()
    check("ops-card")
    page.get_by_role("link", name=t(language, "Mark unhealthy…")).click()
    page.fill("#id_reason", "ECC errors")
    page.get_by_role("checkbox").check()
    page.get_by_role("button", name=t(language, "Confirm")).click()
    expect(page.get_by_text(t(language, "marked unhealthy"), exact=True)).to_be_visible()
    assert Card.objects.get(pk=card.pk).disabled

    # Both in the audit log
    page.get_by_role("link", name=t(language, "Audit log")).click()
    expect(page.locator("tr[data-action='node.drain']")).to_have_count(1)
    expect(page.locator("tr[data-action='card.unhealthy']")).to_have_count(1)
    check("ops-audit")

    # A catalogue template from the allow-list
    AllowedImage.objects.create(
        institution=world["course"].institution, kind="jupyter", reference="quay.io/jupyter/scipy-notebook"
    )
    page.goto(portal_server + "/ops/tenancy/")
    page.get_by_text(t(language, "Add a catalogue template")).click()
    prefix = f"#id_t{world['course'].institution_id}"
    page.locator(f"{prefix}-name").fill("Warm-up")
    page.locator(f"{prefix}-memory_mib").fill("2")
    check("ops-tenancy")
    # The check's resizes leave Chromium to scroll the still focused field when it loses focus,
    # which a click's mousedown does: the button would move away before the mouseup.
    page.locator(f"{prefix}-memory_mib").blur()
    page.get_by_role("button", name=t(language, "Add to the catalogue")).click()
    expect(page.get_by_role("listitem").filter(has_text="Warm-up")).to_have_count(1)
    assert LabTemplate.objects.filter(name="Warm-up", course__isnull=True, memory_mib=2048).exists()
    page.goto(portal_server + "/ops/repairs/")
    check("ops-repairs")
    page.get_by_role("link", name=t(language, "Usage"), exact=True).click()
    expect(page.locator("#usage-chart[data-ready=yes]")).to_have_count(1)
    expect(page.locator(f"tr[data-course='{world['course'].code}']")).to_have_count(1)
    check("ops-usage")
    assert set(AuditEvent.objects.values_list("action", flat=True)) == {"node.drain", "card.unhealthy", "catalogue.create"}
