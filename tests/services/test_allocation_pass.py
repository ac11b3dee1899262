from django.db.models import Sum

from labs.domain.reasons import Reason
from labs.models import Allocation, LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import allocation_release, session_launch, session_stop, session_transition
from tests.factories import course_with_students, node_with_cards


def test_the_pass_admits_queued_sessions_and_records_their_allocation(world):
    sessions = [session_launch(student=s, course=world["course"], template=world["small"]) for s in world["students"]]
    result = allocation_pass()
    assert sorted(result.admitted) == sorted(str(s.pk) for s in sessions)
    assert set(LabSession.objects.values_list("state", flat=True)) == {"admitted"}
    allocations = Allocation.objects.filter(released_at__isnull=True)
    assert allocations.count() == 4
    assert allocations.aggregate(core=Sum("core_percent"))["core"] == 20
    # binpack: all four on one card
    assert allocations.values("card").distinct().count() == 1


def test_a_second_pass_admits_nothing_new(world):
    session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    assert allocation_pass().admitted == []
    assert Allocation.objects.count() == 1


def test_sessions_over_the_course_quota_stay_queued_with_the_reason(db):
    node_with_cards()
    course, templates, students, _ = course_with_students(5, quota={"instance_count": 3})
    for s in students:
        session_launch(student=s, course=course, template=templates[0])
    allocation_pass()
    assert LabSession.objects.filter(state="admitted").count() == 3
    queued = LabSession.objects.filter(state="queued")
    assert queued.count() == 2
    assert {s.reason for s in queued} == {"course quota: 3 of 3 instances in use"}


def test_freed_quota_admits_the_next_queued_session(db):
    node_with_cards()
    course, templates, students, _ = course_with_students(2, quota={"instance_count": 1})
    first = session_launch(student=students[0], course=course, template=templates[0])
    second = session_launch(student=students[1], course=course, template=templates[0])
    allocation_pass()
    assert session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="tester"))
    allocation_pass()
    second.refresh_from_db()
    assert second.state == "admitted"


def test_a_session_that_can_never_fit_fails_with_the_reason(db):
    node_with_cards(memory_mib=32768)
    course, templates, students, _ = course_with_students(1)
    from tests.factories import TemplateFactory

    big = TemplateFactory(institution=course.institution, name="big", slug="big", core_percent=50, memory_mib=40960)
    course.templates.add(big)
    session = session_launch(student=students[0], course=course, template=big)
    result = allocation_pass()
    session.refresh_from_db()
    assert result.refused == [str(session.pk)]
    assert session.state == "failed"
    assert session.reason == "card memory: needs 40 GiB; the largest card has 32 GiB"
    assert session.ended_at is not None


def test_an_unhealthy_card_and_an_unavailable_node_get_nothing(world):
    world["node"].cards.exclude(index=5).update(healthy=False)
    for s in world["students"]:
        session_launch(student=s, course=world["course"], template=world["small"])
    allocation_pass()
    assert set(Allocation.objects.values_list("card__index", flat=True)) == {5}
    world["node"].__class__.objects.update(available=False)
    extra = course_with_students(1, code="X1")
    session_launch(student=extra[2][0], course=extra[0], template=extra[1][0])
    allocation_pass()
    assert LabSession.objects.get(student=extra[2][0]).reason == "capacity: no healthy NPU card is available"


def test_cancelling_an_admitted_session_releases_its_allocation_once(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    assert session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="tester"))
    session.refresh_from_db()
    assert session.state == "stopped"
    allocation = Allocation.objects.get(session=session)
    assert allocation.released_at is not None
    released_at = allocation.released_at
    assert allocation_release(session.pk) is False
    allocation.refresh_from_db()
    assert allocation.released_at == released_at


def test_an_invalid_transition_changes_nothing(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    assert session_transition(session.pk, to="running") is False
    session.refresh_from_db()
    assert session.state == "queued" and session.version == 1


def test_a_course_in_a_cohort_borrows_idle_quota_and_the_allocation_is_marked(db):
    node_with_cards()
    course, templates, students, _ = course_with_students(3, quota={"instance_count": 1, "cohort": "ai-dept"})
    lender, *_ = course_with_students(0, quota={"instance_count": 4, "cohort": "ai-dept"}, code="LEND")
    for s in students:
        session_launch(student=s, course=course, template=templates[0])
    allocation_pass()
    allocations = Allocation.objects.filter(course=course).order_by("created_at", "session__created_at")
    assert allocations.count() == 3
    assert sorted(a.borrowed for a in allocations) == [False, True, True]
    assert lender.quota.instance_count == 4


def test_a_course_outside_any_cohort_never_borrows(db):
    node_with_cards()
    course, templates, students, _ = course_with_students(2, quota={"instance_count": 1})
    course_with_students(0, quota={"instance_count": 4, "cohort": "ai-dept"}, code="LEND")
    for s in students:
        session_launch(student=s, course=course, template=templates[0])
    allocation_pass()
    assert LabSession.objects.filter(course=course, state="queued").get().reason == "course quota: 1 of 1 instances in use"


def test_the_pass_follows_the_configured_spread_policy(db, settings):
    settings.LAB_PLACEMENT = {**settings.LAB_PLACEMENT, "card_policy": "spread"}
    node_with_cards()
    course, templates, students, _ = course_with_students(4)
    for s in students:
        session_launch(student=s, course=course, template=templates[0])
    allocation_pass()
    assert sorted(Allocation.objects.values_list("card__index", flat=True)) == [0, 1, 2, 3]


def test_a_bad_placement_setting_is_refused_clearly():
    import pytest
    from django.core.exceptions import ImproperlyConfigured

    from labs.selectors.capacity import _placement_config_from

    with pytest.raises(ImproperlyConfigured, match="LAB_PLACEMENT is invalid: 'tightest' is not a valid Policy"):
        _placement_config_from({"node_policy": "tightest"})
    with pytest.raises(ImproperlyConfigured, match="unknown keys \\['colour'\\]"):
        _placement_config_from({"colour": "red"})
