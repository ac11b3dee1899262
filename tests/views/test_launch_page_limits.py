"""The student's launch page says how long a lab may run as the controller will enforce it: the
course's maximum, and a template's own when it is shorter."""

from __future__ import annotations

import re

import pytest

from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)  # the page is served in the ASGI handler's threads


def launch_forms(html: str) -> dict[str, str]:
    """Each template's launch form on the page, by the template's name."""
    forms = re.findall(r'<form method="post" action="[^"]*" class="template js-launch">(.*?)</form>', html, re.S)
    return {re.search(r"<strong>(.*?)</strong>", form).group(1): form for form in forms}


def test_a_template_shorter_than_the_course_says_its_own_limit(world):
    world["course"].quota.max_session_minutes = 180
    world["course"].quota.save(update_fields=["max_session_minutes"])
    world["medium"].max_lifetime_minutes = 45  # medium labs stop after 45 minutes, whatever the course allows
    world["medium"].save(update_fields=["max_lifetime_minutes"])
    world["small"].max_lifetime_minutes = 240  # longer than the course: the course's 180 applies
    world["small"].save(update_fields=["max_lifetime_minutes"])

    html = AsgiClient(user=world["students"][0]).get("/").text
    forms = launch_forms(html)

    assert "for up to 180 minutes" in html  # the course's maximum
    assert "Up to 45 minutes a session: this lab&#x27;s limit, shorter than the course&#x27;s." in forms["medium"]
    assert "minutes a session" not in forms["small"]
