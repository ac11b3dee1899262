"""The console's template form: "Offer a smaller lab while this one waits", on by default, through
the ASGI application; another course's instructor and a student cannot use the form."""

import re

import pytest

from labs.models import AllowedImage, LabTemplate
from tests.asgi_client import AsgiClient
from tests.factories import EnrollmentFactory, UserFactory, course_with_students

pytestmark = pytest.mark.django_db(transaction=True)


def form(allowed: AllowedImage, name: str, **extra) -> dict:
    return {"action": "create", "name": name, "image": allowed.pk, "core_percent": 10, "memory_mib": "8", **extra}


def test_the_offer_is_on_by_default_and_the_instructor_can_turn_it_off(world):
    course = world["course"]
    allowed = AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/base:latest")
    instructor = AsgiClient(user=world["instructor"])
    page = instructor.get(f"/courses/{course.pk}/templates/").text
    assert 'name="offers_smaller_lab"' in page and "Offer a smaller lab while this one waits" in page
    box = re.search(r'<input type="checkbox" name="offers_smaller_lab"[^>]*>', page)
    assert box and " checked" in box.group(0)

    assert instructor.post(f"/courses/{course.pk}/templates/", form(allowed, "on", offers_smaller_lab="on")).status_code == 302
    assert instructor.post(f"/courses/{course.pk}/templates/", form(allowed, "off")).status_code == 302
    made = dict(LabTemplate.objects.filter(course=course).values_list("name", "offers_smaller_lab"))
    assert made == {"on": True, "off": False}


def test_others_cannot_create_a_template_in_the_course(world):
    course = world["course"]
    allowed = AllowedImage.objects.create(institution=course.institution, kind="jupyter", reference="jupyter/base:latest")
    other_course, _, _, other_teacher = course_with_students(0, code="OTHER")
    outsider = UserFactory(username="outsider")
    EnrollmentFactory(user=outsider, course=other_course)
    for user in (world["students"][0], other_teacher):
        answer = AsgiClient(user=user).post(f"/courses/{course.pk}/templates/", form(allowed, "sneaky"))
        assert answer.status_code in (403, 404), user
    assert not LabTemplate.objects.filter(name="sneaky").exists()
