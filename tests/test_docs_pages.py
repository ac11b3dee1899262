"""The README stays a front door (at most 250 lines) and every relative link in it and in docs/ leads to a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) and ![alt](target), the target up to a space (a title may follow) or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", flags=re.DOTALL)


def relative_links(page: Path) -> list[str]:
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    targets = [match.group(1) for match in LINK.finditer(text)]
    return [target for target in targets if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")]


def test_the_readme_is_at_most_250_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()

    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail to a page in docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_of_a_page_leads_to_a_file(page):
    missing = []
    for target in relative_links(page):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)

    assert missing == [], f"{page.relative_to(ROOT)} links to what does not exist"


def test_the_link_reader_finds_links_and_images(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('[a](one.md) ![b](img/two.png "title") [c](https://example.org/) [d](#here) `[e](not-a-link.md)`\n')

    assert relative_links(page) == ["one.md", "img/two.png"]


def test_every_page_in_docs_is_linked_from_the_readme():
    linked = {(ROOT / target.split("#", 1)[0]).resolve() for target in relative_links(ROOT / "README.md")}

    assert {page for page in PAGES[1:]} - linked == set()
