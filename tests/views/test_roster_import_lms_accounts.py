"""In a course linked to an LMS, the roster import adds a student's LMS account (found by the
row's e-mail, in the course's institution only) rather than make a second account, and its
preview says per row how the student gets in: their LMS account, or a new account that signs in
through the LMS with no invitation link. Through the ASGI application, in English and Chinese."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from django.contrib.auth import get_user_model

from labs.models import Affiliation, Enrollment
from labs.services.roster import roster_apply
from lti.models import Context, Identity, Registration
from tests.asgi_client import AsgiClient
from tests.factories import InstitutionFactory, UserFactory, affiliate, lti_registration

pytestmark = pytest.mark.django_db(transaction=True)

LMS = "Moodle of Test University"
CSV = "username,email\nann,Ann@Uni.example\nbo,bo@uni.example\n"
WORDS = {
    "en": (
        f"will be added with the student's {LMS} account, found by e-mail: no second account",
        f"an account will be made, then added; their first launch from {LMS} signs them in to it: no invitation link",
    ),
    "zh-hans": (
        f"将以该学生的 {LMS} 账号加入（按电子邮箱找到）：不会另建账号",
        f"将创建账号并加入；该学生首次从 {LMS} 启动时即登录此账号：没有邀请链接",
    ),
}


def lms_account(registration: Registration, subject: str, email: str):
    """An account as an LTI launch through ``registration`` makes it."""
    user = UserFactory(username=f"lti-{subject}", email=email)
    Identity.objects.create(registration=registration, issuer=registration.issuer, subject=subject, user=user)
    affiliate([user], registration.institution, Affiliation.Source.LTI)
    return user


@pytest.fixture
def linked(world):
    course = world["course"]
    ours = lti_registration(course.institution, name=LMS)
    Context.objects.create(registration=ours, context_id="ctx-1", course=course)
    theirs = lti_registration(InstitutionFactory(slug="elsewhere"), name="Canvas of Elsewhere", host="canvas.elsewhere.example")
    return {
        "course": course,
        "ann": lms_account(ours, "s-ann", "ann@uni.example"),
        # Another institution's LMS account with the e-mail of a row: never this course's.
        "rival": lms_account(theirs, "s-bo", "bo@uni.example"),
    }


def preview(client: AsgiClient, course) -> BeautifulSoup:
    response = client.post(f"/courses/{course.pk}/roster/import/", files={"file": ("roster.csv", CSV.encode())})
    assert response.status_code == 200, response.text
    return BeautifulSoup(response.text, "html.parser")


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_each_row_says_how_the_student_gets_in(world, linked, language):
    page = preview(AsgiClient(user=world["instructor"], language=language), linked["course"])

    added, created = WORDS[language]
    rows = {row.find_all("td")[1].get_text(strip=True): row for row in page.select("tbody tr")}
    assert rows["ann"]["data-action"] == "add" and added in rows["ann"].get_text()
    assert rows["bo"]["data-action"] == "create" and created in rows["bo"].get_text()


def test_the_import_adds_the_lms_account_and_makes_no_second_one(world, linked):
    course = linked["course"]
    client = AsgiClient(user=world["instructor"])
    before = get_user_model().objects.count()

    done = client.post(f"/courses/{course.pk}/roster/import/", {"step": "confirm", "csv": CSV})

    assert done.status_code == 302
    members = set(Enrollment.objects.filter(course=course).values_list("user__username", flat=True))
    assert linked["ann"].username in members
    assert not get_user_model().objects.filter(username__startswith="ann").exists()
    # bo's only LMS account is another institution's: a new account of this one is made instead.
    assert linked["rival"].username not in members
    assert get_user_model().objects.count() == before + 1
    assert Enrollment.objects.filter(course=course, user__username__in=["bo", "bo@uni-test"]).exists()


def test_an_email_of_two_lms_accounts_or_a_second_row_for_one_is_rejected_and_nothing_is_made(world, linked):
    course = linked["course"]
    ours = Context.objects.get(course=course).registration
    lms_account(ours, "s-cy-1", "cy@uni.example")
    lms_account(ours, "s-cy-2", "CY@uni.example")
    text = "username,email\ncy,cy@uni.example\nann,ann@uni.example\nann2,ann@uni.example\n"
    before = get_user_model().objects.count()

    plan = roster_apply(course=course, text=text)

    rows = {row.username: row for row in plan.rows}
    assert rows["cy"].problems == ["more than one account of your LMS has this e-mail; add the student through the LMS"]
    assert rows["ann"].lms_account and rows["ann"].user_id == linked["ann"].pk
    assert rows["ann2"].problems == ["listed twice in this file"]
    assert get_user_model().objects.count() == before
