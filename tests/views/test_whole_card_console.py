"""Whole-card templates in the instructor console (made, refused, previewed, listed) and on the student's card."""

from __future__ import annotations

from django.test import Client

from labs.domain.states import SessionState
from labs.models import AllowedImage, LabTemplate
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_transition
from tests.factories import TemplateFactory


def logged_in(user, language: str = "en") -> Client:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    return client


def lab_image(course) -> AllowedImage:
    return AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/scipy")


def form(allowed: AllowedImage, **overrides) -> dict[str, object]:
    return {"action": "create", "name": "pair", "image": allowed.pk, "core_percent": 100, "memory_mib": "64", **overrides}


def test_an_instructor_makes_a_two_card_template_and_the_course_lists_it_as_such(world):
    course = world["course"]
    client = logged_in(world["instructor"])

    response = client.post(f"/courses/{course.pk}/templates/", form(lab_image(course), card_count="2"))

    assert response.status_code == 302
    made = LabTemplate.objects.get(name="pair")
    assert (made.card_count, made.core_percent, made.memory_mib) == (2, 100, 65536)
    assert "2 whole cards, 128\u00a0GiB memory in all" in client.get(f"/courses/{course.pk}/templates/").content.decode()


def test_a_two_card_template_with_part_of_the_core_is_refused_and_nothing_is_made(world):
    course = world["course"]
    client = logged_in(world["instructor"])

    response = client.post(f"/courses/{course.pk}/templates/", form(lab_image(course), card_count="2", core_percent=25))

    assert response.status_code == 200
    assert "A lab on 2 whole cards has all of each card&#x27;s AI Core: set 100 %, not 25 %." in response.content.decode()
    assert not LabTemplate.objects.filter(name="pair").exists()


def test_a_template_on_more_cards_than_the_node_has_is_refused(world):
    course = world["course"]
    client = logged_in(world["instructor"])

    allowed = lab_image(course)
    response = client.post(f"/courses/{course.pk}/templates/", form(allowed, card_count="8"))
    assert response.status_code == 302  # the world's node has 8 cards
    response = client.post(f"/courses/{course.pk}/templates/", form(allowed, name="nine", card_count="9"))

    assert response.status_code == 200
    assert not LabTemplate.objects.filter(name="nine").exists()


def test_the_preview_counts_two_card_labs(world):
    course = world["course"]
    client = logged_in(world["instructor"])
    share = {"core_percent": 100, "memory_mib": "64", "scenario": "development"}

    pairs = client.get(f"/courses/{course.pk}/templates/preview/", {**share, "card_count": 2}).json()
    singles = client.get(f"/courses/{course.pk}/templates/preview/", share).json()

    # 8 cards: four pairs or eight whole single cards; the guarantee (800 %) holds four pairs.
    assert (pairs["cluster_empty"], pairs["quota_total"]) == (4, 4)
    assert (singles["cluster_empty"], singles["quota_total"]) == (8, 8)


def test_the_students_card_says_two_whole_cards(world):
    course = world["course"]
    pair = TemplateFactory(institution=course.institution, name="pair", core_percent=100, memory_mib=65536, card_count=2)
    course.templates.add(pair)
    session = session_launch(student=world["students"][0], course=course, template=pair)
    allocation_pass()
    assert session_transition(session.pk, to=SessionState.STARTING)

    english = logged_in(world["students"][0]).get("/").content.decode()

    assert "2 whole cards, 128\u00a0GiB memory in all" in english
    assert "2 whole NPUs from NPU 0" in english
