"""Every page names the portal's icon, and the static files serve it (a browser otherwise asks
for /favicon.ico, gets the portal's 404 and shows a blank tab)."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest
from bs4 import BeautifulSoup

from tests.asgi_client import AsgiClient


def icon_of(html: str) -> str:
    links = BeautifulSoup(html, "html.parser").select('head link[rel~="icon"]')
    assert len(links) == 1, links
    assert links[0]["type"] == "image/svg+xml"
    return links[0]["href"]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_page_links_the_icon_and_the_static_files_serve_it(transactional_db, language):
    visitor = AsgiClient(language=language)
    page = visitor.get("/accounts/login/")
    assert page.status_code == 200

    icon = visitor.get(icon_of(page.text))

    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert ElementTree.fromstring(icon.content).tag == "{http://www.w3.org/2000/svg}svg"


def test_a_page_rendered_without_the_request_links_the_icon_too(transactional_db):
    """The bare pages (400, 500, CSRF failure) wear the same dress."""
    page = AsgiClient(language="en").get("/", headers={"Host": "evil.example"})
    assert page.status_code == 400
    assert icon_of(page.text).endswith(".svg")
