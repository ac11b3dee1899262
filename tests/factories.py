"""Test data, in one place."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from labs.models import Affiliation, Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node

PASSWORD = "test-password-123"
CARD_MIB = 64 * 1024


class InstitutionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Institution
        django_get_or_create = ["slug"]

    name = factory.Sequence(lambda n: f"University {n}")
    slug = factory.Sequence(lambda n: f"uni-{n}")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n:04d}")
    password = factory.django.Password(PASSWORD)


class CourseFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Course

    institution = factory.SubFactory(InstitutionFactory)
    code = factory.Sequence(lambda n: f"C{n:03d}")
    title = "AI Practice"
    term = "2026 Autumn"


class CourseQuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = CourseQuota

    course = factory.SubFactory(CourseFactory)
    core_percent = 800
    memory_mib = 8 * CARD_MIB
    instance_count = 128
    sessions_per_student = 1
    max_session_minutes = 180


class TemplateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LabTemplate

    institution = factory.SubFactory(InstitutionFactory)
    name = factory.Sequence(lambda n: f"template {n}")
    slug = factory.Sequence(lambda n: f"template-{n}")
    kind = LabTemplate.Kind.JUPYTER
    image = "jupyter/base:latest"
    core_percent = 5
    memory_mib = 4096


class EnrollmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Enrollment
        skip_postgeneration_save = True

    user = factory.SubFactory(UserFactory)
    course = factory.SubFactory(CourseFactory)
    role = Enrollment.Role.STUDENT

    @factory.post_generation
    def affiliated(enrollment, create, extracted, **kwargs):  # noqa: N805 (factory_boy's signature)
        """A member of a course is an account of its institution, as the enrolling paths make it."""
        if create:
            affiliate([enrollment.user], enrollment.course.institution)


def affiliate(users, institution: Institution, source: str = Affiliation.Source.ROSTER) -> None:
    """Make ``users`` accounts of ``institution`` (what a roster, LTI launch or role does)."""
    Affiliation.objects.bulk_create(
        (Affiliation(user=user, institution=institution, source=source) for user in users), ignore_conflicts=True
    )


def node_with_cards(name: str = "n1", cards: int = 8, memory_mib: int = CARD_MIB) -> Node:
    node = Node.objects.create(name=name)
    Card.objects.bulk_create(
        Card(node=node, index=i, die_id=f"{name}-die-{i}", chip_type="Ascend910B", memory_mib=memory_mib) for i in range(cards)
    )
    return node


def course_with_students(
    students: int = 4, *, quota: dict | None = None, templates: list[LabTemplate] | None = None, code: str | None = None
):
    """A course with a quota, ``students`` enrolled students, one instructor and the given templates."""
    institution = InstitutionFactory(slug="uni-test", name="Test University")
    course = CourseFactory(institution=institution, **({"code": code} if code else {}))
    CourseQuotaFactory(course=course, **(quota or {}))
    if templates is None:
        templates = [
            TemplateFactory(institution=institution, name="small", slug=f"small-{course.code}", core_percent=5, memory_mib=4096),
            TemplateFactory(
                institution=institution, name="medium", slug=f"medium-{course.code}", core_percent=10, memory_mib=8192
            ),
        ]
    course.templates.add(*templates)
    instructor = UserFactory(username=f"teacher-{course.code.lower()}")
    EnrollmentFactory(user=instructor, course=course, role=Enrollment.Role.INSTRUCTOR)
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"s-{course.code.lower()}-{i:03d}", password=UserFactory.build().password)
        for i in range(students)
    )
    Enrollment.objects.bulk_create(Enrollment(user=u, course=course, role=Enrollment.Role.STUDENT) for u in users)
    affiliate(users, institution)
    return course, templates, users, instructor
