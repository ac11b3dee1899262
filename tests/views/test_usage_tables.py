"""The usage tables (an instructor's per student, an operator's per course) with 128 rows of a few
minutes' NPU time each: small values read with two decimals and their total is the chart's, the
rows come 50 a page, and each column sorts them, on the server, with aria-sort on its header; in
English and Chinese, through the ASGI application."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape

import pytest
from bs4 import BeautifulSoup
from django.contrib.auth.models import Permission
from django.utils import timezone

from labs.models import Allocation, Card, LabSession, UsageRecord
from tests.asgi_client import AsgiClient
from tests.factories import CourseFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 128


def hold(*, student, course, template, card, seconds: int) -> None:
    """What a release leaves in the ledger: a stopped session, its released allocation and its usage record."""
    end = timezone.now() - timedelta(seconds=5)
    start = end - timedelta(seconds=seconds)
    session = LabSession.objects.create(
        student=student, course=course, template=template, state="stopped", end_state="stopped", ended_at=end
    )
    LabSession.objects.filter(pk=session.pk).update(created_at=start)
    allocation = Allocation.objects.create(
        session=session, card=card, course=course, core_percent=5, memory_mib=4096, scenario="development"
    )
    Allocation.objects.filter(pk=allocation.pk).update(created_at=start, released_at=end)
    UsageRecord.objects.create(
        allocation=allocation,
        session=session,
        student=student,
        course=course,
        institution=course.institution,
        template=template,
        started_at=start,
        ended_at=end,
        core_percent=5,
        memory_mib=4096,
        core_percent_seconds=5 * seconds,
        memory_mib_seconds=4096 * seconds,
    )


def small(i: int) -> int:
    """Row ``i``'s seconds: 30 s and up, 5 % x 30 s = 0.04 AI-Core-% x h, which one decimal shows as 0.0."""
    return 30 + i


@pytest.fixture
def course_of_128(db):
    from tests.factories import course_with_students, node_with_cards

    node_with_cards()
    course, templates, students, instructor = course_with_students(ROWS)
    card = Card.objects.first()
    for i, student in enumerate(students):
        hold(student=student, course=course, template=templates[0], card=card, seconds=small(i))
    return course, students, instructor


@pytest.fixture
def courses_of_128(world):
    platform = UserFactory(username="platform")
    platform.user_permissions.add(Permission.objects.get(codename="operate_platform"))
    card = Card.objects.first()
    student = world["students"][0]
    for i in range(ROWS):
        course = CourseFactory(institution=world["course"].institution, code=f"U{i:03d}")
        hold(student=student, course=course, template=world["small"], card=card, seconds=small(i))
    return platform


def rows(html: str, cell: str) -> list[str]:
    soup = BeautifulSoup(html, "html.parser")
    return [td.get_text(strip=True) for td in soup.select(f"table.usage tbody td[data-field={cell}]")]


def total(html: str, cell: str) -> str:
    return BeautifulSoup(html, "html.parser").select_one(f"[data-testid=usage-total] [data-field={cell}]").get_text(strip=True)


def chart_total(html: str) -> float:
    data = json.loads(unescape(re.search(r'<script id="usage-data" type="application/json">(.*?)</script>', html).group(1)))
    return sum(data["core"])


def header(html: str, key: str):
    return BeautifulSoup(html, "html.parser").select_one(f"th[data-sort={key}]")


def test_the_instructors_table_shows_small_values_and_their_total_is_the_charts(course_of_128):
    course, _, instructor = course_of_128

    html = AsgiClient(user=instructor, language="en").get(f"/courses/{course.pk}/usage/").text

    core = rows(html, "core_term")
    assert len(core) == 50  # a page
    assert core[0] == "0.04" and rows(html, "gib_term")[0] == "0.03"  # 30 s of 5 % and 4 GiB
    assert "0.0" not in core
    assert total(html, "core_term") == f"{chart_total(html):.2f}" == f"{5 * sum(map(small, range(ROWS))) / 3600:.2f}"


def test_the_instructors_table_pages_and_sorts_by_each_column(course_of_128):
    course, students, instructor = course_of_128
    client = AsgiClient(user=instructor, language="en")
    url = f"/courses/{course.pk}/usage/"

    first = client.get(url).text
    assert 'rel="next"' in first and "page 1 of 3" in first
    assert header(first, "student")["aria-sort"] == "ascending"
    assert not header(first, "core_term").has_attr("aria-sort")
    assert header(first, "core_term").a["href"] == "?sort=core_term"

    longest = client.get(url + "?sort=-core_term").text
    assert header(longest, "core_term")["aria-sort"] == "descending"
    assert header(longest, "core_term").a["href"] == "?sort=core_term"
    assert rows(longest, "core_term")[0] == f"{5 * small(ROWS - 1) / 3600:.2f}"
    last_page = client.get(url + "?sort=-core_term&page=3").text
    assert len(rows(last_page, "core_term")) == ROWS - 100
    assert rows(last_page, "core_term")[-1] == "0.04"
    assert 'href="?sort=-core_term&amp;page=2"' in last_page

    shortest = client.get(url + "?sort=core_term").text
    assert header(shortest, "core_term")["aria-sort"] == "ascending"
    assert rows(shortest, "core_term")[0] == "0.04"
    for key in ("sessions_week", "core_week", "gib_week", "sessions_term", "gib_term", "student"):
        assert header(client.get(url + f"?sort=-{key}").text, key)["aria-sort"] == "descending"


def test_an_unknown_sort_says_so_and_shows_the_usual_order(course_of_128):
    course, _, instructor = course_of_128

    html = AsgiClient(user=instructor, language="en").get(f"/courses/{course.pk}/usage/?sort=password").text

    assert "The table cannot be sorted by “password”; it is shown in its usual order." in html
    assert header(html, "student")["aria-sort"] == "ascending"


def test_the_operators_table_of_128_courses_pages_sorts_and_shows_small_values(courses_of_128):
    client = AsgiClient(user=courses_of_128, language="en")

    first = client.get("/ops/usage/?days=7").text
    assert len(rows(first, "core")) == 50 and "0.0" not in rows(first, "core")
    assert total(first, "core") == f"{chart_total(first):.2f}"
    assert header(first, "institution")["aria-sort"] == "ascending"
    assert header(first, "core").a["href"] == "?days=7&sort=core"

    longest = client.get("/ops/usage/?days=7&sort=-core").text
    assert header(longest, "core")["aria-sort"] == "descending"
    assert rows(longest, "core")[0] == f"{5 * small(ROWS - 1) / 3600:.2f}"
    assert 'href="?days=7&amp;sort=-core&amp;page=2"' in longest
    for key in ("course", "students", "sessions", "gib"):
        assert header(client.get(f"/ops/usage/?sort={key}").text, key)["aria-sort"] == "ascending"


def test_the_instructors_table_reads_in_chinese(course_of_128):
    course, _, instructor = course_of_128

    html = AsgiClient(user=instructor, language="zh-hans").get(f"/courses/{course.pk}/usage/?sort=-core_term").text

    assert "第 1 页，共 3 页" in html and "下一页" in html
    assert f"共 {ROWS} 名学生合计" in html
    assert header(html, "core_term")["aria-sort"] == "descending"
    assert rows(html, "core_term")[-1] == f"{5 * small(ROWS - 50) / 3600:.2f}"


def test_the_operators_table_reads_in_chinese(courses_of_128):
    html = AsgiClient(user=courses_of_128, language="zh-hans").get("/ops/usage/?sort=-gib").text

    assert "第 1 页，共 3 页" in html and "下一页" in html
    assert f"共 {ROWS} 门课程合计" in html
    assert header(html, "gib")["aria-sort"] == "descending"
