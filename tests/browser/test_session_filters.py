"""The course page's session filters on a phone, in English and Chinese: each label stays on the
line of the field it names (a flex row used to wrap a label to the end of one line and its
select to the start of the next)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_instructor_console import PHONE, log_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Each filter label's box and the box of the field it is for.
PAIRS = """
(form) => [...form.querySelectorAll("label[for]")].map((label) => {
  const field = document.getElementById(label.htmlFor);
  const [a, b] = [label.getBoundingClientRect(), field.getBoundingClientRect()];
  return {label: label.textContent, label_box: [a.top, a.bottom, a.right], field_box: [b.top, b.bottom, b.left, b.right]};
})
"""


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_each_filter_label_is_beside_its_field_at_390_px(world, portal_server, browser_page, language):
    page = browser_page
    page.set_viewport_size(PHONE)
    log_in(page, portal_server, world["instructor"].username, language)
    page.goto(f"{portal_server}/courses/{world['course'].pk}/")
    form = page.locator("form.filters")
    expect(form.locator("select")).to_have_count(2)

    pairs = form.evaluate(PAIRS)

    assert len(pairs) == 3  # state, template, student
    for pair in pairs:
        label_top, label_bottom, label_right = pair["label_box"]
        field_top, field_bottom, field_left, field_right = pair["field_box"]
        # On one line: their boxes overlap vertically, the label left of its field, both on screen.
        assert label_top < field_bottom and field_top < label_bottom, pair
        assert label_right <= field_left and field_right <= PHONE["width"], pair
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
