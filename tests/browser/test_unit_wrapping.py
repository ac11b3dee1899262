"""A figure and its unit ("3.75 GiB", "5 %") stay on one line in the student's cards (the
course's templates, the sessions) at 1280 px, in English and Chinese: a card narrow enough to
wrap its share text breaks it elsewhere."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from labs.models import LabTemplate
from labs.services.sessions import session_launch
from tests.factories import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Each figure and unit in the cards' text that takes more than one line when a card is ``width`` px
# wide (a card's width follows its course's names, descriptions and number of templates).
FIGURES_AND_LINES = """
(width) => {
  const found = [];
  const pattern = /\\d[\\d.,]*[\\s\\u00a0]*(GiB|%)/g;
  for (const card of document.querySelectorAll(".templates .template, #sessions article.session")) {
    card.style.width = card.style.minWidth = card.style.maxWidth = `${width}px`;
    const text = card.textContent;
    const walker = document.createTreeWalker(card, NodeFilter.SHOW_TEXT);
    const nodes = [];
    let offset = 0;
    while (walker.nextNode()) { nodes.push([walker.currentNode, offset]); offset += walker.currentNode.length; }
    const at = (position) => {
      const [node, start] = nodes.filter(([, start]) => start <= position).pop();
      return [node, position - start];
    };
    for (const match of text.matchAll(pattern)) {
      const range = document.createRange();
      range.setStart(...at(match.index));
      range.setEnd(...at(match.index + match[0].length - 1));
      range.setEnd(range.endContainer, range.endOffset + 1);
      const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
      if (tops.size !== 1) found.push(`${match[0]} at ${width} px`);
    }
  }
  return found;
}
"""


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_figures_and_their_units_stay_on_one_line_in_course_cards_at_1280_px(world, portal_server, browser_page, language):
    # The demo's templates: 3.75 GiB and 7.5 GiB; a session card shows the share too.
    LabTemplate.objects.filter(pk=world["small"].pk).update(memory_mib=3840)
    LabTemplate.objects.filter(pk=world["medium"].pk).update(memory_mib=7680)
    session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.context.add_cookies([{"name": "django_language", "value": language, "url": portal_server}])
    page.goto(portal_server + "/")
    page.fill("#id_username", world["students"][0].username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator(".templates .template")).to_have_count(2)
    expect(page.locator("#sessions article.session")).to_have_count(1)

    assert "GiB" in page.locator("#sessions article.session").inner_text()
    split = [figure for width in range(200, 480, 3) for figure in page.evaluate(FIGURES_AND_LINES, width)]

    assert split == []
