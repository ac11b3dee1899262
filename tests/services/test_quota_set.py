"""The quota_set service checks every quota by the one rule (labs.domain.quota_spec), whoever
calls it: a refused quota changes nothing and records nothing."""

from __future__ import annotations

import pytest

from labs.models import AuditEvent, CourseQuota, Institution, Node
from labs.selectors.courses import course_quota_use
from labs.services.courses import QUOTA_FIELDS, QuotaRefused, quota_set
from tests.factories import CourseFactory, CourseQuotaFactory, InstitutionFactory

GIB = 1024


def values_of(course, **changes) -> dict:
    row = CourseQuota.objects.filter(course=course).values(*QUOTA_FIELDS).get()
    return {**row, **changes}


def test_a_quota_over_the_cluster_off_the_grid_or_lending_more_than_its_guarantee_is_refused(world):
    course = world["course"]
    before = CourseQuota.objects.filter(course=course).values().get()
    bad = values_of(course, instance_count=129, memory_mib=1000, cohort="ai-dept", lend_core_percent=801, borrow_instances=-1)

    with pytest.raises(QuotaRefused) as refused:
        quota_set(course=course, values=bad, in_use=course_quota_use(course=course))

    assert {(e.field, e.code) for e in refused.value.errors} == {
        ("instance_count", "cluster.instances"),
        ("memory_mib", "grid"),
        ("lend_core_percent", "lend_over_guarantee"),
        ("borrow_instances", "min"),
    }
    assert refused.value.message_dict["memory_mib"] == ["Memory is reserved in steps of 0.125 GiB: use 0.875 GiB or 1 GiB."]
    assert CourseQuota.objects.filter(course=course).values().get() == before
    assert not AuditEvent.objects.filter(action="quota.set").exists()


def test_on_a_cluster_that_allocates_memory_in_gib_a_128_mib_step_is_refused(world):
    course = world["course"]
    Node.objects.update(memory_granule_mib=GIB)

    with pytest.raises(QuotaRefused) as refused:
        quota_set(course=course, values=values_of(course, memory_mib=64 * GIB + 128), in_use=course_quota_use(course=course))

    assert refused.value.message_dict == {"memory_mib": ["Memory is reserved in steps of 1 GiB: use 64 GiB or 65 GiB."]}
    change = quota_set(course=course, values=values_of(course, memory_mib=64 * GIB), in_use=course_quota_use(course=course))
    assert change.quota.memory_mib == 64 * GIB


def test_the_values_must_name_every_field_and_no_other(world):
    course = world["course"]
    with pytest.raises(ValueError, match="missing \\['cohort'\\]"):
        quota_set(course=course, values={k: v for k, v in values_of(course).items() if k != "cohort"}, in_use=None)


def test_a_guarantee_the_other_courses_already_hold_is_refused_naming_them_unless_overcommit_is_allowed(world):
    """The world's course guarantees the whole 8-card node; a second course of the institution asks for 32 instances."""
    ai101 = world["course"]
    ai101.code = "AI101"
    ai101.save(update_fields=["code"])
    CourseQuota.objects.filter(course=ai101).update(instance_count=96)
    elsewhere = CourseFactory(institution=InstitutionFactory(slug="elsewhere"), code="SECRET9")
    CourseQuotaFactory(course=elsewhere, instance_count=16, core_percent=0, memory_mib=0)
    course = CourseFactory(institution=ai101.institution, code="AI102")
    values = {**values_of(ai101), "instance_count": 32, "core_percent": 320, "memory_mib": 128 * GIB}

    with pytest.raises(QuotaRefused) as refused:
        quota_set(course=course, values=values, in_use=course_quota_use(course=course))

    messages = refused.value.message_dict
    assert set(messages) == {"instance_count", "core_percent", "memory_mib"}
    assert messages["instance_count"] == [
        "The cluster holds at most 128 development instances; other courses guarantee 112 of them "
        "(AI101: 96; courses of other institutions: 16), so at most 16 can be guaranteed to this course."
    ]
    assert "(AI101: 800 %)" in messages["core_percent"][0] and "SECRET9" not in str(messages)
    assert not CourseQuota.objects.filter(course=course).exists()
    assert not AuditEvent.objects.filter(action="quota.set").exists()

    Institution.objects.filter(pk=ai101.institution_id).update(allow_overcommit=True)
    course.institution.refresh_from_db()
    change = quota_set(course=course, values=values, in_use=course_quota_use(course=course))
    assert change.created and change.quota.instance_count == 32


@pytest.mark.django_db(transaction=True)
def test_guarantees_set_at_the_same_moment_never_add_up_past_the_cluster(world):
    """Eight courses ask for 32 of the node's 128 instances at once: four get them, four are refused."""
    import threading

    from django.db import connection

    CourseQuota.objects.filter(course=world["course"]).update(instance_count=0, core_percent=0, memory_mib=0)
    courses = [CourseFactory(institution=world["course"].institution, code=f"RACE{i}") for i in range(8)]
    values = {**values_of(world["course"]), "instance_count": 32}
    barrier = threading.Barrier(len(courses))
    outcomes: list[str] = []

    def ask(course) -> None:
        try:
            barrier.wait()
            quota_set(course=course, values=values, in_use=course_quota_use(course=course))
            outcomes.append("saved")
        except QuotaRefused:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(course,)) for course in courses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["refused"] * 4 + ["saved"] * 4
    assert sum(CourseQuota.objects.values_list("instance_count", flat=True)) == 128
