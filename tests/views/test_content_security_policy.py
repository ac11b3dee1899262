"""Every page carries a strict Content-Security-Policy: scripts, styles and connections from the
portal only, nothing inline, no plugins, no framing, forms posted to the portal only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from tests.factories import PASSWORD, UserFactory

ROOT = Path(__file__).resolve().parents[2]
STRICT = {
    "default-src": {"'self'"},
    "script-src": {"'self'"},
    "style-src": {"'self'"},
    "img-src": {"'self'"},
    "connect-src": {"'self'"},
    "object-src": {"'none'"},
    "base-uri": {"'self'"},
    "frame-ancestors": {"'none'"},
    "form-action": {"'self'"},
}


def policy(response) -> dict[str, set[str]]:
    header = response["Content-Security-Policy"]
    directives = [part.split() for part in header.split(";") if part.strip()]
    return {name: set(values) for name, *values in directives}


def assert_strict(response) -> None:
    assert response.status_code in (200, 429), response.status_code
    directives = policy(response)
    assert directives == STRICT
    assert not any("'unsafe-" in value for values in directives.values() for value in values)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_login_page_has_the_strict_policy(db):
    assert_strict(Client().get("/accounts/login/"))


def test_the_lockout_page_has_the_strict_policy(db):
    UserFactory(username="ada")
    client = Client()
    for _ in range(5):
        response = client.post("/accounts/login/", {"username": "ada", "password": "wrong-password"})
    assert response.status_code == 429
    assert_strict(client.post("/accounts/login/", {"username": "ada", "password": PASSWORD}))


def test_the_student_and_console_pages_have_the_strict_policy(world):
    course = world["course"]
    assert_strict(signed_in(world["students"][0]).get("/"))
    teacher = signed_in(world["instructor"])
    for url in ("/teach/", f"/courses/{course.pk}/", f"/courses/{course.pk}/usage/", f"/courses/{course.pk}/templates/"):
        assert_strict(teacher.get(url))


def test_the_admin_has_the_strict_policy_too(db):
    operator = signed_in(UserFactory(username="operator", is_staff=True, is_superuser=True))
    for url in ("/admin/", "/admin/auth/user/", "/admin/axes/accessattempt/"):
        assert_strict(operator.get(url))


@pytest.mark.parametrize(
    "template", sorted(str(p.relative_to(ROOT)) for d in ("templates", "lti/templates") for p in (ROOT / d).rglob("*.html"))
)
def test_no_template_has_inline_script_style_or_handler(template):
    """The browser tests see what a page does; this names the template that would break it."""
    html = (ROOT / template).read_text()
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler"
    assert not re.search(r"\sstyle\s*=", html), "a style attribute"
    assert "<style" not in html, "a <style> element"
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag, f"an inline script: {tag}"
