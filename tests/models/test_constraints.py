"""The database itself refuses rows that break an invariant, even when no form or service is in the way."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from labs.models import Allocation, Card, CourseQuota, Enrollment, LabSession
from tests.factories import CourseFactory, InstitutionFactory, TemplateFactory, course_with_students, node_with_cards


def refused_by_the_database(create) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        create()


@pytest.fixture
def institution(db):
    return InstitutionFactory(slug="uni-test")


@pytest.fixture
def session(world):
    return LabSession.objects.create(student=world["students"][0], course=world["course"], template=world["small"], secret="s")


def allocation_for(session, world, **fields) -> Allocation:
    values = {"core_percent": 5, "memory_mib": 4096, "scenario": "development", **fields}
    return Allocation.objects.create(session=session, card=world["node"].cards.first(), course=world["course"], **values)


def test_a_valid_template_is_accepted(institution):
    TemplateFactory(institution=institution, core_percent=100, memory_mib=128)


@pytest.mark.parametrize("core_percent", [0, 101])
def test_a_template_core_percent_outside_1_to_100_is_refused(institution, core_percent):
    refused_by_the_database(lambda: TemplateFactory(institution=institution, core_percent=core_percent))


@pytest.mark.parametrize("memory_mib", [100, 0, 4097])
def test_a_template_memory_off_the_128_mib_grid_is_refused(institution, memory_mib):
    refused_by_the_database(lambda: TemplateFactory(institution=institution, memory_mib=memory_mib))


def test_a_template_memory_off_the_grid_fails_validation_with_a_readable_message(institution):
    template = TemplateFactory.build(institution=institution, memory_mib=100)
    with pytest.raises(ValidationError) as error:
        template.full_clean()
    assert "Memory must be a multiple of 128 MiB." in error.value.message_dict["memory_mib"]


@pytest.mark.parametrize("kind", ["jupyter", "vllm"])
def test_a_template_without_a_container_image_is_refused(institution, kind):
    refused_by_the_database(lambda: TemplateFactory(institution=institution, kind=kind, image=""))


def test_a_template_without_a_container_image_fails_validation_with_a_readable_message(institution):
    template = TemplateFactory.build(institution=institution, kind="vllm", image="", model="Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ValidationError) as error:
        template.full_clean()
    assert error.value.message_dict["image"] == [
        "A lab template needs a container image (a vLLM template: the image that serves its model, from the allow-list)."
    ]


def test_a_quota_memory_off_the_128_mib_grid_is_refused(db):
    course = CourseFactory()
    refused_by_the_database(
        lambda: CourseQuota.objects.create(course=course, core_percent=100, memory_mib=1000, instance_count=1)
    )


def test_a_quota_of_zero_sessions_per_student_is_refused(db):
    course = CourseFactory()
    refused_by_the_database(
        lambda: CourseQuota.objects.create(
            course=course, core_percent=100, memory_mib=1024, instance_count=1, sessions_per_student=0
        )
    )


def test_a_user_cannot_be_enrolled_twice_in_a_course(world):
    student = world["students"][0]
    refused_by_the_database(
        lambda: Enrollment.objects.create(user=student, course=world["course"], role=Enrollment.Role.ASSISTANT)
    )
    assert Enrollment.objects.filter(user=student).count() == 1


def test_a_node_cannot_have_two_cards_with_the_same_index(db):
    node = node_with_cards(cards=2)
    refused_by_the_database(lambda: Card.objects.create(node=node, index=1, memory_mib=1024))


def test_the_same_card_index_on_two_nodes_is_fine(db):
    node_with_cards("a", cards=1)
    node_with_cards("b", cards=1)
    assert Card.objects.filter(index=0).count() == 2


def test_a_valid_allocation_is_accepted(world, session):
    allocation_for(session, world, core_percent=100, memory_mib=128)


def test_a_best_effort_allocation_without_a_floor_is_accepted(world, session):
    allocation_for(session, world, core_percent=0, memory_mib=4096)


@pytest.mark.parametrize(("core_percent", "memory_mib"), [(101, 4096), (5, 127), (5, 0), (5, 4000)])
def test_an_allocation_outside_the_vendor_limits_is_refused(world, session, core_percent, memory_mib):
    refused_by_the_database(lambda: allocation_for(session, world, core_percent=core_percent, memory_mib=memory_mib))


def test_a_session_holds_at_most_one_allocation(world, session):
    allocation_for(session, world)
    refused_by_the_database(lambda: allocation_for(session, world))
    assert Allocation.objects.filter(session=session).count() == 1


def test_a_session_state_outside_the_state_machine_is_refused(world):
    refused_by_the_database(
        lambda: LabSession.objects.create(
            student=world["students"][0], course=world["course"], template=world["small"], state="bogus"
        )
    )


@pytest.mark.parametrize("state", ["stopped", "failed"])
def test_an_ended_session_must_say_when_it_ended(world, state):
    student, course, template = world["students"][0], world["course"], world["small"]
    refused_by_the_database(lambda: LabSession.objects.create(student=student, course=course, template=template, state=state))
    LabSession.objects.create(student=student, course=course, template=template, state=state, ended_at=timezone.now())


def test_a_session_cannot_be_moved_to_an_ended_state_without_an_end_time(session):
    refused_by_the_database(lambda: LabSession.objects.filter(pk=session.pk).update(state="stopped"))
    session.refresh_from_db()
    assert session.state == "queued"


def test_courses_of_one_institution_have_unique_codes_per_term(db):
    course, *_ = course_with_students(0)
    refused_by_the_database(lambda: CourseFactory(institution=course.institution, code=course.code, term=course.term))
    CourseFactory(institution=course.institution, code=course.code, term="2027 Spring")
