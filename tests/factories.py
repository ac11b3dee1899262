"""Test data, in one place."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from labs.models import Affiliation, Card, Course, CourseQuota, Enrollment, Institution, LabTemplate, Node
from lti.models import Registration

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


def smaller_lab_world(students: int = 2) -> dict:
    """One 64 GiB card and two courses: "LLM1" offers big (50 % / 32 GiB), medium (30 % / 16 GiB)
    and small (10 % / 4 GiB); "CV1" offers filler (60 % / 40 GiB: once it runs, big waits for the
    card while medium and small fit) and other_medium (30 % / 16 GiB: takes the room medium wants)."""
    node_with_cards(cards=1)
    institution = InstitutionFactory(slug="uni-test", name="Test University")

    def template(name: str, core_percent: int, memory_gib: int) -> LabTemplate:
        slug = name.replace(" ", "-")
        return TemplateFactory(
            institution=institution, name=name, slug=slug, core_percent=core_percent, memory_mib=memory_gib * 1024
        )

    big, medium, small = template("big", 50, 32), template("medium", 30, 16), template("small", 10, 4)
    course, _, users, instructor = course_with_students(students, templates=[big, medium, small], code="LLM1")
    filler, other_medium = template("filler", 60, 40), template("other medium", 30, 16)
    other, _, others, _ = course_with_students(2, templates=[filler, other_medium], code="CV1")
    return {
        "course": course,
        "students": users,
        "instructor": instructor,
        "big": big,
        "medium": medium,
        "small": small,
        "other_course": other,
        "other_students": others,
        "filler": filler,
        "other_medium": other_medium,
    }


def usage_ledger(course: Course, templates: list[LabTemplate], students) -> dict:
    """Every kind of usage span in ``course`` (on a node made before): an ended session's record
    (``students[0]``), an open session's allocation (``students[1]``), and a lab pre-started for a
    class, claimed by ``students[2]`` 30 minutes ago two hours after its admission (the course's,
    under the reservation's ``holder``, before the claim; the student's after)."""
    from datetime import timedelta

    from django.utils import timezone

    from labs.domain.reasons import Reason
    from labs.models import Allocation, LabSession, Reservation, ReservationSlot
    from labs.services.allocation import allocation_pass
    from labs.services.sessions import session_launch, session_stop

    ended = session_launch(student=students[0], course=course, template=templates[1])
    open_ = session_launch(student=students[1], course=course, template=templates[0])
    holder = get_user_model().objects.create(username="reserved-class", is_active=False)
    reservation = Reservation.objects.create(
        course=course, template=templates[0], count=1, start_time=timezone.localtime().time(), minutes=90, holder=holder
    )
    slot = ReservationSlot.objects.create(
        reservation=reservation, starts_at=timezone.now() - timedelta(hours=1), ends_at=timezone.now() + timedelta(hours=1)
    )
    claimed = session_launch(student=students[2], course=course, template=templates[0])
    allocation_pass()
    Allocation.objects.update(created_at=timezone.now() - timedelta(hours=2))
    LabSession.objects.filter(pk=claimed.pk).update(reservation_slot=slot, claimed_at=timezone.now() - timedelta(minutes=30))
    session_stop(session_id=ended.pk, reason=Reason.of("session.stopped_by", who="test"))
    return {"ended": ended, "open": open_, "claimed": claimed, "holder": holder}


def lti_registration(institution: Institution, *, name: str = "Moodle", host: str = "moodle.example.edu") -> Registration:
    """An LMS registered with ``institution`` (LTI 1.3), its endpoints under ``https://{host}``."""
    return Registration.objects.create(
        institution=institution,
        name=name,
        issuer=f"https://{host}",
        client_id="tool",
        auth_login_url=f"https://{host}/auth",
        auth_token_url=f"https://{host}/token",
        keyset_url=f"https://{host}/jwks",
    )
