"""Guided setup through the ASGI application, in English and Chinese: the course page lists what
the course lacks before a launch, each line linking to the page that fixes it, until it is ready;
each step's success message names the next step with a link."""

from __future__ import annotations

import re

import pytest
from bs4 import BeautifulSoup

from labs.models import Enrollment
from tests.asgi_client import AsgiClient
from tests.factories import CourseFactory, node_with_cards

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = {
    "en": {
        "quota": "Set the quota: without one, no launch is accepted.",
        "templates": "Offer at least one template.",
        "students": "Enrol at least one student.",
        "ready": "Ready: students can launch.",
        "quota_saved": ("Quota saved.", "Next: offer templates"),
        "attached": ("is offered in the course now.", "Next: enrol students"),
        "added": ("Added", "Ready: students can launch"),
    },
    "zh-hans": {
        "quota": "设置配额：没有配额，任何启动都不会被接受。",
        "templates": "至少提供一个模板。",
        "students": "至少添加一名学生。",
        "ready": "就绪：学生可以启动实验。",
        "quota_saved": ("配额已保存。", "下一步：提供模板"),
        "attached": ("本课程现已提供", "下一步：添加学生"),
        "added": ("已将", "就绪：学生可以启动实验"),
    },
}
LANGUAGES = list(WORDS)


@pytest.fixture
def new_course(world):
    """A course just created in the world's institution: no quota, no template, no student; a
    second node gives its guarantee room beside the world's course, which holds the first."""
    node_with_cards("n2")
    course = CourseFactory(institution=world["course"].institution, code="NEW1")
    Enrollment.objects.create(user=world["instructor"], course=course, role=Enrollment.Role.INSTRUCTOR)
    return course


def checklist(page) -> dict[str, tuple[str, str | None]]:
    """The setup checklist's lines by step: (text, link)."""
    found = BeautifulSoup(page.text, "html.parser").select("[data-testid=setup-checklist] li")
    return {li["data-step"]: (li.get_text(strip=True), li.a["href"] if li.a else None) for li in found}


def next_step(client: AsgiClient, response) -> tuple[str, str]:
    """After a POST: the page it redirects to, and that page's success message's text and next-step link."""
    assert response.status_code == 302, response.text[:500]
    page = client.get(response.headers["location"])
    soup = BeautifulSoup(page.text, "html.parser")
    link = soup.select_one(".flash.success [data-testid=next-step]")
    assert link is not None, page.text[:2000]
    return link.parent.get_text(" ", strip=True), link["href"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_new_course_page_lists_each_missing_step_linking_to_its_page(world, new_course, language):
    words = WORDS[language]
    page = AsgiClient(user=world["instructor"], language=language).get(f"/courses/{new_course.pk}/")

    assert page.status_code == 200
    assert checklist(page) == {
        "quota": (words["quota"], f"/courses/{new_course.pk}/quota/"),
        "templates": (words["templates"], f"/courses/{new_course.pk}/templates/"),
        "students": (words["students"], f"/courses/{new_course.pk}/roster/"),
    }
    assert words["ready"] not in page.text


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_ready_course_shows_no_checklist_but_that_students_can_launch(world, language):
    page = AsgiClient(user=world["instructor"], language=language).get(f"/courses/{world['course'].pk}/")

    assert page.status_code == 200
    assert checklist(page) == {} and 'data-testid="setup-checklist"' not in page.text
    assert WORDS[language]["ready"] in page.text


@pytest.mark.parametrize("language", LANGUAGES)
def test_an_assistant_reads_the_checklist_without_links(world, new_course, language):
    assistant = world["students"][1]
    Enrollment.objects.create(user=assistant, course=new_course, role=Enrollment.Role.ASSISTANT)
    page = AsgiClient(user=assistant, language=language).get(f"/courses/{new_course.pk}/")

    assert {step: link for step, (_, link) in checklist(page).items()} == {"quota": None, "templates": None, "students": None}


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_steps_success_message_names_the_next_one_with_a_link(world, new_course, language):
    words, base = WORDS[language], f"/courses/{new_course.pk}/"
    client = AsgiClient(user=world["instructor"], language=language)
    quota = {"instance_count": 4, "core_percent": 40, "memory_mib": "16", "sessions_per_student": 1, "max_session_minutes": 60}

    text, link = next_step(client, client.post(base + "quota/", quota))
    assert words["quota_saved"][0] in text and words["quota_saved"][1] in text and link == base + "templates/"
    assert set(checklist(client.get(base))) == {"templates", "students"}

    attach = {"action": "attach", "template": world["small"].pk}
    text, link = next_step(client, client.post(base + "templates/", attach))
    assert words["attached"][0] in text and words["attached"][1] in text and link == base + "roster/"

    add = {"action": "add", "identifier": world["students"][0].username, "role": "student"}
    text, link = next_step(client, client.post(base + "roster/", add))
    assert words["added"][0] in text and words["added"][1] in text and link == base

    page = client.get(base)
    assert checklist(page) == {} and words["ready"] in page.text


def test_the_next_step_link_skips_a_step_already_done(world, new_course):
    new_course.templates.add(world["small"])
    client = AsgiClient(user=world["instructor"], language="en")
    quota = {"instance_count": 4, "core_percent": 40, "memory_mib": "16", "sessions_per_student": 1, "max_session_minutes": 60}

    text, link = next_step(client, client.post(f"/courses/{new_course.pk}/quota/", quota))
    assert re.search(r"Quota saved\. Next: enrol students", text) and link == f"/courses/{new_course.pk}/roster/"
