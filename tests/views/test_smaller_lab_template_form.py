"""The console's template form: "Offer a smaller lab while this one waits", on by default, through
the ASGI application; another course's instructor and a student cannot use the form."""

import re

import pytest

from labs.models import AllowedImage, AuditEvent, LabTemplate
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


def own_template(course) -> LabTemplate:
    """A template of the course's own (not the institution's catalogue), offered in it."""
    own = LabTemplate.objects.create(
        institution=course.institution,
        course=course,
        name="own",
        slug="own",
        image="jupyter/base:latest",
        core_percent=10,
        memory_mib=8192,
    )
    course.templates.add(own)
    return own


def offer_form(template, on: bool) -> dict:
    return {"action": "smaller-offer", "template": template.pk, "on": "1" if on else "0"}


def test_the_instructor_turns_the_offer_off_and_on_for_an_existing_template(world):
    course = world["course"]
    own = own_template(course)
    instructor = AsgiClient(user=world["instructor"])
    page = instructor.get(f"/courses/{course.pk}/templates/").text
    assert "Stop offering a smaller lab for own" in page

    answer = instructor.post(f"/courses/{course.pk}/templates/", offer_form(own, on=False))
    assert answer.status_code == 302
    own.refresh_from_db()
    assert own.offers_smaller_lab is False
    page = instructor.get(f"/courses/{course.pk}/templates/").text
    assert "own: no smaller lab is offered while it waits." in page and "Offer a smaller lab for own" in page
    assert AuditEvent.objects.filter(action="template.smaller_offer_off", target=f"own in {course.code}").count() == 1

    instructor.post(f"/courses/{course.pk}/templates/", offer_form(own, on=True))
    own.refresh_from_db()
    assert own.offers_smaller_lab is True
    assert AuditEvent.objects.filter(action="template.smaller_offer_on").count() == 1


def test_a_catalogue_template_or_another_courses_is_not_changed_here(world):
    course = world["course"]
    catalogue = world["small"]  # the institution's: other courses may offer it
    assert catalogue.course_id is None and course.templates.filter(pk=catalogue.pk).exists()
    other_course, (other_own, *_), _, _ = course_with_students(0, code="OTHER")
    other_own.course = other_course
    other_own.save()
    instructor = AsgiClient(user=world["instructor"])
    page = instructor.get(f"/courses/{course.pk}/templates/").text
    assert "set by the operators" in page
    for template in (catalogue, other_own):
        answer = instructor.post(f"/courses/{course.pk}/templates/", offer_form(template, on=False))
        assert answer.status_code == 302
        template.refresh_from_db()
        assert template.offers_smaller_lab is True
    answer = instructor.post(f"/courses/{course.pk}/templates/", {"action": "smaller-offer", "template": "x", "on": "0"})
    assert answer.status_code == 302
    page = instructor.get(f"/courses/{course.pk}/templates/").text
    assert "Only this course&#x27;s own templates are changed here" in page
    assert not AuditEvent.objects.filter(action__startswith="template.smaller_offer").exists()


def test_a_student_or_another_instructor_cannot_turn_it_off(world):
    course = world["course"]
    own = own_template(course)
    _other_course, _, _, other_teacher = course_with_students(0, code="OTHER")
    for user in (world["students"][0], other_teacher):
        answer = AsgiClient(user=user).post(f"/courses/{course.pk}/templates/", offer_form(own, on=False))
        assert answer.status_code in (403, 404), user
    own.refresh_from_db()
    assert own.offers_smaller_lab is True
