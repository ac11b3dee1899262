"""The roster import's pages through the ASGI application, in English and Chinese: the preview
shows its counts (to add, role to change, unchanged, rejected) and every problem of a row; after
the import the instructor gets each new account's invitation link (page and CSV), or is told the
course's LMS signs them in."""

from __future__ import annotations

import csv
import io

import pytest
from bs4 import BeautifulSoup
from django.contrib.auth import get_user_model
from django.utils import translation

from labs.models import Enrollment
from lti.models import Context
from tests.asgi_client import AsgiClient
from tests.factories import UserFactory, affiliate, lti_registration

pytestmark = pytest.mark.django_db(transaction=True)

LANGUAGES = ["en", "zh-hans"]


def t(language: str, text: str) -> str:
    with translation.override(language):
        return translation.gettext(text)


def roster_csv(world) -> str:
    students = world["students"]
    return (
        "username,email,role\n"
        f"{students[0].username},,student\n"  # unchanged
        f"{students[1].username},,assistant\n"  # role to change
        "known,,student\n"  # an existing account joins
        "new-1,new1@example.edu,student\n"  # a new account
        "new-2,,student\n"  # a new account
        "bad user!,not-an-email,professor\n"  # rejected, three problems
    )


def preview(client: AsgiClient, course, text: str) -> BeautifulSoup:
    response = client.post(f"/courses/{course.pk}/roster/import/", files={"file": ("roster.csv", text.encode())})
    assert response.status_code == 200, response.text
    return BeautifulSoup(response.text, "html.parser")


def counts(page: BeautifulSoup, testid: str) -> dict[str, str]:
    block = page.find(attrs={"data-testid": testid})
    return {item["data-count"]: item.find("dd").get_text(strip=True) for item in block.find_all(attrs={"data-count": True})}


@pytest.fixture
def instructor(world):
    affiliate([UserFactory(username="known")], world["course"].institution)
    return world["instructor"]


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_preview_shows_its_counts_and_every_problem_of_a_row(world, instructor, language):
    course = world["course"]
    client = AsgiClient(user=instructor, language=language)

    page = preview(client, course, roster_csv(world))

    assert page.html["lang"] == language
    assert page.find("h2").get_text(strip=True) == t(language, "Preview of the import")
    assert counts(page, "import-summary") == {"add": "3", "update": "1", "unchanged": "1", "rejected": "1"}
    problems = [li.get_text(strip=True) for li in page.select("tr[data-action=error] ul.problems li")]
    assert problems == [
        t(language, "%(username)s is not a valid username") % {"username": "bad user!"},
        t(language, "%(email)s is not an e-mail address") % {"email": "not-an-email"},
        t(language, "unknown role %(role)s: use student, assistant or instructor") % {"role": "professor"},
    ]
    assert page.find(attrs={"data-testid": "sign-in"}) is not None
    assert len(page.select("tr[data-action=create]")) == 2
    assert not Enrollment.objects.filter(course=course, user__username="known").exists()  # nothing written


@pytest.mark.parametrize("language", LANGUAGES)
def test_after_the_import_each_new_account_has_an_invitation_link_on_the_page_and_in_a_csv(world, instructor, language):
    course = world["course"]
    client = AsgiClient(user=instructor, language=language)
    preview(client, course, roster_csv(world))

    done = client.post(f"/courses/{course.pk}/roster/import/", {"step": "confirm", "csv": roster_csv(world)})

    assert done.status_code == 302 and done.headers["location"] == f"/courses/{course.pk}/roster/import/done/"
    response = client.get(done.headers["location"])
    assert response.status_code == 200 and "no-store" in response.headers["cache-control"]
    page = BeautifulSoup(response.text, "html.parser")
    assert page.html["lang"] == language
    assert counts(page, "import-result") == {"add": "3", "update": "1", "unchanged": "1", "rejected": "1"}
    rows = page.select("tr[data-invitation]")
    links = {row["data-invitation"]: row.select_one(".invitation-link").get_text(strip=True) for row in rows}
    assert set(links) == {"new-1", "new-2"}
    assert all(link.startswith("http://testserver/accounts/invitation/") for link in links.values())
    assert len(page.select("button[data-copy]")) == 2

    download = client.get(done.headers["location"] + "?format=csv")
    assert download.status_code == 200 and download.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(download.text)))
    assert {row["username"]: row["email"] for row in rows} == {"new-1": "new1@example.edu", "new-2": ""}
    opened = AsgiClient().get(rows[0]["invitation_link"].removeprefix("http://testserver"))
    assert opened.status_code == 302 and opened.headers["location"].endswith("/set-password/")


def test_the_result_page_shows_links_to_no_one_else(world, instructor):
    """Another instructor of the course, or this one in another browser, sees no links of this import."""
    course = world["course"]
    AsgiClient(user=instructor).post(f"/courses/{course.pk}/roster/import/", {"step": "confirm", "csv": "username\nnew-1\n"})
    other = AsgiClient(user=instructor).get(f"/courses/{course.pk}/roster/import/done/")
    assert other.status_code == 302 and other.headers["location"] == f"/courses/{course.pk}/roster/"


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_course_linked_to_an_lms_says_its_new_accounts_sign_in_there_and_gives_no_link(world, instructor, language):
    course = world["course"]
    registration = lti_registration(course.institution, name="Moodle of Test University")
    Context.objects.create(registration=registration, context_id="ctx-1", course=course)
    client = AsgiClient(user=instructor, language=language)

    page = preview(client, course, "username\nnew-1\n")
    assert "Moodle of Test University" in page.find(attrs={"data-testid": "sign-in"}).get_text()
    assert page.select_one("tr[data-action=create]") is not None

    done = client.post(f"/courses/{course.pk}/roster/import/", {"step": "confirm", "csv": "username\nnew-1\n"})
    result = BeautifulSoup(client.get(done.headers["location"]).text, "html.parser")
    assert "Moodle of Test University" in result.find(attrs={"data-testid": "sign-in"}).get_text()
    assert result.select("tr[data-invitation]") == []
    assert not get_user_model().objects.get(username="new-1").has_usable_password()


def test_only_the_course_instructors_reach_the_result_page(world, instructor):
    course = world["course"]
    assistant = UserFactory(username="ta")
    Enrollment.objects.create(user=assistant, course=course, role="assistant")
    url = f"/courses/{course.pk}/roster/import/done/"
    assert AsgiClient(user=assistant).get(url).status_code == 403
    assert AsgiClient(user=world["students"][0]).get(url).status_code == 404
    assert AsgiClient().get(url).headers["location"].startswith("/accounts/login/")
    refused = AsgiClient(user=assistant).post(f"/courses/{course.pk}/roster/import/", {"step": "confirm", "csv": "username\nx\n"})
    assert refused.status_code == 403 and not get_user_model().objects.filter(username="x").exists()
