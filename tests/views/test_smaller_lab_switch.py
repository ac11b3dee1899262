"""The card's "Switch to it" through the ASGI application: only the session's student, only with
the CSRF token, a clear answer when the room went, and the home page showing the offer on reload."""

import pytest

from labs.models import Allocation, InstitutionRole, LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.asgi_client import AsgiClient
from tests.factories import InstitutionFactory, UserFactory, smaller_lab_world

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queued(db):
    w = smaller_lab_world()
    session_launch(student=w["other_students"][0], course=w["other_course"], template=w["filler"])
    allocation_pass()
    session = session_launch(student=w["students"][0], course=w["course"], template=w["big"])
    allocation_pass()
    w["session"] = LabSession.objects.get(pk=session.pk)
    assert w["session"].smaller_offer["template"] == w["medium"].pk
    return w


def url(w) -> str:
    return f"/sessions/{w['session'].pk}/smaller/"


def test_the_home_page_shows_the_offer_with_its_button(queued):
    page = AsgiClient(user=queued["students"][0]).get("/").text
    assert "A 30\u00a0% / 16\u00a0GiB lab can start now instead" in page
    assert f'name="template" value="{queued["medium"].pk}"' in page
    assert "Switch to it" in page


def test_the_owner_switches_and_hears_both_cards(queued):
    client = AsgiClient(user=queued["students"][0])
    answer = client.post(url(queued), {"template": queued["medium"].pk}, headers={"Accept": "application/json"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["withdrawn"]["id"] == str(queued["session"].pk) and body["withdrawn"]["state"] == "stopped"
    assert body["withdrawn"]["smaller_offer"] is None
    assert body["session"]["state"] == "admitted" and body["session"]["template"] == "medium"
    assert Allocation.objects.filter(session_id=body["session"]["id"], released_at__isnull=True).count() == 1


def test_without_the_csrf_token_nothing_happens(queued):
    client = AsgiClient(user=queued["students"][0])
    answer = client.request("POST", url(queued), data={"template": queued["medium"].pk})
    assert answer.status_code == 403
    assert LabSession.objects.get(pk=queued["session"].pk).state == "queued"
    assert not LabSession.objects.filter(template=queued["medium"]).exists()


def test_another_student_the_instructor_an_operator_and_another_institution_cannot_switch_it(queued):
    institution = queued["course"].institution
    operator = UserFactory(username="op")
    InstitutionRole.objects.create(user=operator, institution=institution, role="operator")
    elsewhere = InstitutionFactory(slug="elsewhere", name="Elsewhere")
    foreign = UserFactory(username="foreign")
    InstitutionRole.objects.create(user=foreign, institution=elsewhere, role="operator")
    people = (queued["students"][1], queued["instructor"], queued["other_students"][1], operator, foreign)
    for user in people:
        answer = AsgiClient(user=user).post(url(queued), {"template": queued["medium"].pk})
        assert answer.status_code == 404, user
    assert LabSession.objects.get(pk=queued["session"].pk).state == "queued"
    assert AsgiClient().post(url(queued), {"template": queued["medium"].pk}).status_code == 302  # to the login


def test_a_switch_after_the_room_went_is_answered_with_the_reason(queued):
    session_launch(student=queued["other_students"][1], course=queued["other_course"], template=queued["other_medium"])
    allocation_pass()
    client = AsgiClient(user=queued["students"][0])
    answer = client.post(url(queued), {"template": queued["medium"].pk}, headers={"Accept": "application/json"})
    assert answer.status_code == 409
    assert "no longer fits" in answer.json()["error"]
    assert LabSession.objects.get(pk=queued["session"].pk).state == "queued"


def test_a_bad_template_is_refused_with_a_message(queued):
    client = AsgiClient(user=queued["students"][0])
    for bad in ("", "abc", str(queued["filler"].pk)):
        answer = client.post(url(queued), {"template": bad}, headers={"Accept": "application/json"})
        assert answer.status_code == 409 and answer.json()["error"], bad
    assert LabSession.objects.get(pk=queued["session"].pk).state == "queued"
