"""The institution boundary of every roster path: the roster page, the CSV import (preview and
confirm), the API's roster PUT and the LTI roster sync.

A row naming another institution's account, by username or by e-mail, must be answered exactly
as a row naming no account at all: the same action, the same words, no name or e-mail of that
account, and that account is never enrolled. Each check runs the same request twice, once naming
the other institution's account and once naming nobody, and compares the answers with the two
identifiers put to one placeholder.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from labs.models import Affiliation, AuditEvent, Enrollment, Institution, InstitutionRole
from lti.models import Context, Identity, Registration
from lti.services import roster_sync as lti_roster_sync
from tests.api.conftest import api, make_token  # noqa: F401 (fixtures of the API's roster PUT)
from tests.factories import CourseFactory, EnrollmentFactory, UserFactory

FOREIGN = {"username": "rival", "email": "rival@elsewhere.example", "first_name": "Secretname", "last_name": "Hidden"}
NOBODY = {"username": "nobody", "email": "nobody@nowhere.example"}


@pytest.fixture
def rival(world):
    """An account of another institution, in one of its courses."""
    elsewhere = Institution.objects.create(name="Elsewhere University", slug="elsewhere")
    user = UserFactory(**FOREIGN)
    EnrollmentFactory(user=user, course=CourseFactory(institution=elsewhere, code="ELSE1"))
    return user


def instructor_client(world) -> Client:
    client = Client()
    client.force_login(world["instructor"])
    return client


def same_answer(foreign: str, nobody: str, *identifiers: tuple[str, str]) -> None:
    """The two answers are equal once each pair of identifiers is one placeholder, and the foreign
    one shows nothing of the other institution's account."""
    for leaked in (FOREIGN["first_name"], FOREIGN["last_name"]):
        assert leaked not in foreign
    # The longest first: a username is part of its e-mail address.
    for index, (theirs, unknown) in sorted(enumerate(identifiers), key=lambda pair: -len(pair[1][0])):
        foreign = foreign.replace(theirs, f"<id{index}>")
        nobody = nobody.replace(unknown, f"<id{index}>")
    csrf = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"|"csrfToken":\s*"[^"]+"')
    assert csrf.sub("", foreign) == csrf.sub("", nobody)


def not_enrolled(world, rival) -> None:
    assert not Enrollment.objects.filter(course=world["course"], user=rival).exists()
    assert not Affiliation.objects.filter(user=rival, institution=world["course"].institution).exists()


def page_messages(response) -> str:
    return " | ".join(str(m) for m in response.context["messages"])


@pytest.mark.parametrize("field", ["username", "email"])
def test_the_roster_page_adds_no_account_of_another_institution_and_says_what_it_says_of_nobody(world, rival, field):
    client = instructor_client(world)
    url = f"/courses/{world['course'].pk}/roster/"
    answers = [
        client.post(url, {"action": "add", "identifier": who[field], "role": "student"}, follow=True)
        for who in (FOREIGN, NOBODY)
    ]
    assert all(a.status_code == 200 for a in answers)
    same_answer(page_messages(answers[0]), page_messages(answers[1]), (FOREIGN[field], NOBODY[field]))
    same_answer(answers[0].content.decode(), answers[1].content.decode(), (FOREIGN[field], NOBODY[field]))
    assert page_messages(answers[0])  # something was said: the add was refused
    not_enrolled(world, rival)


CSV_CASES = {
    "username": ("username\n{username}\n", [("username",)]),
    "email": ("email\n{email}\n", [("email",)]),
    "username with another e-mail": ("username,email\n{username},other@else.example\n", [("username",)]),
    "username with its own e-mail": ("username,email\n{username},{email}\n", [("username",), ("email",)]),
}


def csv_for(case: str, who: dict) -> str:
    return CSV_CASES[case][0].format(**who)


def pairs(case: str) -> list[tuple[str, str]]:
    return [(FOREIGN[name], NOBODY[name]) for (name,) in CSV_CASES[case][1]]


@pytest.mark.parametrize("case", list(CSV_CASES))
def test_a_csv_preview_answers_another_institutions_account_as_nobody(world, rival, case):
    client = instructor_client(world)
    url = f"/courses/{world['course'].pk}/roster/import/"
    answers = [
        client.post(url, {"file": SimpleUploadedFile("r.csv", csv_for(case, who).encode())}) for who in (FOREIGN, NOBODY)
    ]
    plans = [[(r.action, r.message) for r in a.context["plan"].rows] for a in answers]
    same_answer(repr(plans[0]), repr(plans[1]), *pairs(case))
    same_answer(answers[0].content.decode(), answers[1].content.decode(), *pairs(case))
    not_enrolled(world, rival)


@pytest.mark.parametrize("case", ["username", "username with another e-mail", "username with its own e-mail"])
def test_a_confirmed_csv_makes_a_new_account_of_this_institution_not_the_other_ones(world, rival, case):
    course = world["course"]
    client = instructor_client(world)
    for who in (FOREIGN, NOBODY):
        client.post(f"/courses/{course.pk}/roster/import/", {"step": "confirm", "csv": csv_for(case, who)})
    not_enrolled(world, rival)
    made = {
        e.user.username: e.user
        for e in Enrollment.objects.filter(course=course, user__username__in=["rival@uni-test", "nobody@uni-test"])
    }
    # Both new accounts are named alike: the name tells nothing of the other institution's "rival".
    assert set(made) == {"rival@uni-test", "nobody@uni-test"}
    for user in made.values():
        assert user.affiliations.get().institution == course.institution
        assert not user.has_usable_password()
    # The file again: the accounts made are found, nothing changes.
    again = client.post(
        f"/courses/{course.pk}/roster/import/", {"file": SimpleUploadedFile("r.csv", csv_for(case, FOREIGN).encode())}
    )
    assert [r.action for r in again.context["plan"].rows] == ["unchanged"]


@pytest.mark.parametrize("field", ["username", "email"])
def test_the_api_roster_answers_another_institutions_account_as_nobody(api, world, rival, field):  # noqa: F811
    url = f"/api/v1/courses/{world['course'].pk}/roster/"
    teacher = {"username": world["instructor"].username, "role": "instructor"}
    answers = []
    for who in (FOREIGN, NOBODY):
        response = api.call("PUT", url, {"members": [teacher, {field: who[field]}]})
        assert response.status_code == 200, response.content
        answers.append(response)
        not_enrolled(world, rival)
    # The second PUT removes the first one's account: compare each answer's row for the named person.
    rows = [[r for r in a.json()["rows"] if r["result"] != "removed" and r.get(field) != teacher.get(field)] for a in answers]
    same_answer(repr(rows[0]), repr(rows[1]), (FOREIGN[field], NOBODY[field]))
    listed = api.call("GET", url).json()
    assert FOREIGN["email"] not in repr(listed) and FOREIGN["first_name"] not in repr(listed)


def test_the_lti_roster_sync_enrols_no_account_of_another_institution(world, rival):
    course = world["course"]
    elsewhere = rival.affiliations.get().institution

    def registration(institution, issuer):
        return Registration.objects.create(
            institution=institution,
            name=issuer,
            issuer=issuer,
            client_id="tool",
            auth_login_url=issuer + "/auth",
            auth_token_url=issuer + "/token",
            keyset_url=issuer + "/jwks",
        )

    theirs = registration(elsewhere, "https://lms.elsewhere.example")
    Identity.objects.create(registration=theirs, issuer=theirs.issuer, subject="u-42", user=rival)
    ours = registration(course.institution, "https://lms.uni-test.example")
    context = Context.objects.create(registration=ours, context_id="ctx-1", course=course)

    # The same subject, e-mail and name, from this institution's LMS: another person to the portal.
    member = {"user_id": "u-42", "roles": ["Learner"], "status": "Active", "email": FOREIGN["email"], "given_name": "X"}
    report = lti_roster_sync(context=context, members=[member])
    assert report.added == 1
    not_enrolled(world, rival)
    (newcomer,) = Identity.objects.filter(registration=ours)
    assert newcomer.user != rival
    assert newcomer.user.affiliations.get().institution == course.institution
    assert Enrollment.objects.filter(course=course, user=newcomer.user).exists()
    assert get_user_model().objects.filter(pk=rival.pk, enrollments__course=course).count() == 0


def test_a_platform_operator_links_an_account_which_the_institutions_rosters_can_then_add(world, rival):
    course = world["course"]
    institution_operator = UserFactory(username="inst-op")
    InstitutionRole.objects.create(user=institution_operator, institution=course.institution, role="operator")
    link = {"action": "affiliate", "institution": course.institution.pk, "username": rival.username}

    refused = Client()
    refused.force_login(institution_operator)
    assert refused.post("/ops/tenancy/", link).status_code == 403  # only the platform's operators link
    not_enrolled(world, rival)

    platform = Client()
    platform.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    linked = platform.post("/ops/tenancy/", link, follow=True)
    assert "rival is an account of Test University" in page_messages(linked)
    assert rival.affiliations.get(institution=course.institution).source == "invitation"
    assert AuditEvent.objects.filter(action="institution.affiliate", target="rival in uni-test").exists()
    again = platform.post("/ops/tenancy/", link, follow=True)
    assert "already" in page_messages(again)

    instructor_client(world).post(
        f"/courses/{course.pk}/roster/", {"action": "add", "identifier": rival.email, "role": "student"}
    )
    assert Enrollment.objects.get(course=course, user=rival).role == "student"


def test_an_enrolment_made_in_the_admin_makes_the_account_one_of_the_institution(world):
    course, person = world["course"], UserFactory(username="by-hand")
    admin = Client()
    admin.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    response = admin.post("/admin/labs/enrollment/add/", {"user": person.pk, "course": course.pk, "role": "student"})
    assert response.status_code == 302, response.content
    assert person.affiliations.get().institution == course.institution
    # So the roster finds them as the member they are, not as someone to make again.
    again = instructor_client(world).post(
        f"/courses/{course.pk}/roster/import/", {"file": SimpleUploadedFile("r.csv", b"username\nby-hand\n")}
    )
    assert [r.action for r in again.context["plan"].rows] == ["unchanged"]


def test_a_scoped_name_held_by_an_account_made_by_hand_gets_a_number(world, rival):
    course = world["course"]
    UserFactory(username="rival@uni-test")  # named so by hand, of no institution
    UserFactory(username="rival-2@uni-test")
    instructor_client(world).post(f"/courses/{course.pk}/roster/import/", {"step": "confirm", "csv": "username\nrival\n"})
    made = Enrollment.objects.get(course=course, user__affiliations__source="roster", user__username__startswith="rival")
    assert made.user.username == "rival-3@uni-test"
    not_enrolled(world, rival)
