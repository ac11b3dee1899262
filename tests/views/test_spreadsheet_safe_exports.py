"""CSV exports cannot attack a spreadsheet: text that a spreadsheet would run as a formula (a
student's name from an LMS or a roster import, a course code from an LTI context) comes out
with a leading quote, through the ASGI application as Daphne serves it."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission
from django.test import AsyncClient

from labs.exports import csv_document, spreadsheet_safe
from labs.models import Course, Enrollment
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.factories import UserFactory

# (first name, last name, username): each starts with a character OWASP lists (tab and carriage
# return only survive in a username: Django strips a full name).
HOSTILE = [
    ("=cmd|' /C calc'!A0", "Smith", "=1+1"),
    ('+HYPERLINK("https://evil.example/")', "Doe", "+ada"),
    ("-2+3+cmd|' /C calc'!A0", "Roe", "-bob"),
    ("@SUM(1+1)*cmd|' /C calc'!A0", "Poe", "@carol"),
    ("\t=1+1", "Tab", "\t=dave"),
    ("\r=1+1", "Return", "\r=erin"),
]


def cells(response) -> list[list[str]]:
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def _hostile_students(course) -> list:
    users = [UserFactory(username=username, first_name=first, last_name=last) for first, last, username in HOSTILE]
    Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in users)
    session_launch(student=users[0], course=course, template=Course.objects.get(pk=course.pk).templates.first())
    allocation_pass()
    return users


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_console_usage_csv_neutralises_students_names_and_usernames(world):
    course = world["course"]
    await sync_to_async(_hostile_students)(course)
    client = AsyncClient()
    await client.aforce_login(world["instructor"])

    rows = cells(await client.get(f"/courses/{course.pk}/usage/", {"format": "csv"}))

    by_username = {row[0]: row for row in rows[1:]}
    for first, last, username in HOSTILE:
        row = by_username["'" + username]
        assert row[1] == "'" + f"{first} {last}".strip()  # Django's full name is stripped: "\t=1+1" shows as "=1+1"
    assert all(not cell.startswith(("=", "+", "-", "@", "\t", "\r")) for row in rows for cell in row)
    hostile = by_username["'" + HOSTILE[0][2]]
    assert hostile[2] == "1" and float(hostile[3]) >= 0  # figures stay numbers


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_the_operators_usage_csv_neutralises_course_codes_and_terms(world):
    course = world["course"]

    def hostile_course():
        Course.objects.filter(pk=course.pk).update(code='=HYPERLINK("https://evil.example/")', term="@SUM(1)")
        _hostile_students(course)
        platform = UserFactory(username="platform")
        platform.user_permissions.add(Permission.objects.get(codename="operate_platform"))
        return platform

    platform = await sync_to_async(hostile_course)()
    client = AsyncClient()
    await client.aforce_login(platform)

    rows = cells(await client.get("/ops/usage/", {"days": 7, "format": "csv"}))

    (row,) = rows[1:]
    assert row[1:3] == ['\'=HYPERLINK("https://evil.example/")', "'@SUM(1)"]
    assert row[3:5] == ["1", "1"]


def test_only_text_is_neutralised_and_numbers_stay_numbers():
    assert [spreadsheet_safe(c) for c in ("=1", "+1", "-1", "@a", "\tx", "\rx")] == ["'=1", "'+1", "'-1", "'@a", "'\tx", "'\rx"]
    assert [spreadsheet_safe(c) for c in ("a=1", " =1", "", "'=1")] == ["a=1", " =1", "", "'=1"]
    assert [spreadsheet_safe(c) for c in (-1, -2.5, Decimal("-3"))] == [-1, -2.5, Decimal("-3")]
    assert csv_document(["name", "hours"], [["-x", -1.5], ["y", 2.0]]) == "name,hours\r\n'-x,-1.50\r\ny,2.00\r\n"
