"""An operator watches the cluster page while a node is drained: the summary above the heatmap
counts it, live, and stops calling the cluster whole; in English and Chinese, and the page passes
axe-core and fits 390 px."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from labs.services.operations import node_drain
from tests.browser.test_instructor_console import DESKTOP, Checker, log_in
from tests.browser.test_session_card import off_the_browser_loop
from tests.factories import UserFactory, node_with_cards

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WORDS = {
    "en": {
        "whole": "2 nodes, all taking labs.",
        "cards": "16 cards: 0 full, 0 not taking sessions.",
        "drained": "1 of 2 nodes drained, 0 not ready, 0 not answering: they take no new labs.",
        "drained_cards": "16 cards: 0 full, 8 not taking sessions.",
        "nothing_stranded": "Nothing is stranded on the nodes that take labs;",
        "badge": "drained",
    },
    "zh-hans": {
        "whole": "共 2 个节点，全部接受实验。",
        "cards": "共 16 张卡：0 张已满，0 张不接受会话。",
        "drained": "2 个节点中 1 个已排空，0 个未就绪，0 个无响应：它们不接受新的实验。",
        "drained_cards": "共 16 张卡：0 张已满，8 张不接受会话。",
        "nothing_stranded": "接受实验的节点上没有碎片；",
        "badge": "已排空",
    },
}


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_drained_node_is_counted_on_the_cluster_page_live(world, portal_server, browser_page, language):
    words = WORDS[language]
    node_with_cards("n2")
    operator = UserFactory(username="platform-op")
    operator.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    page = browser_page.context.browser.new_context(viewport=DESKTOP).new_page()
    log_in(page, portal_server, operator.username, language)
    page.goto(portal_server + "/ops/")
    expect(page.locator("body[data-live=yes]")).to_have_count(1)
    summary = page.get_by_test_id("cluster-summary")
    expect(summary).to_have_text(words["whole"])
    expect(page.locator("[data-summary=cards]")).to_have_text(words["cards"])

    off_the_browser_loop(node_drain, node=world["node"], by=operator, reason="firmware upgrade")

    expect(summary).to_have_text(words["drained"], timeout=15_000)
    expect(page.locator("[data-summary=cards]")).to_have_text(words["drained_cards"])
    expect(page.get_by_test_id("fragmentation")).to_contain_text(words["nothing_stranded"])
    page.reload()
    expect(summary).to_have_text(words["drained"])
    expect(page.locator(f"[data-node='{world['node'].name}'] .badge").first).to_have_text(words["badge"])
    Checker(page, language)("ops-cluster-drained")
