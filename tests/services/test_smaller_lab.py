"""The allocation pass offers a smaller lab to a session queued for capacity, and the student's
switch to it (labs.services.smaller_lab): one transaction, checked again, nothing lost."""

import pytest
from django.utils import translation

from labs.models import Allocation, LabSession
from labs.selectors.sessions import session_event_payload, session_for_user
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from labs.services.smaller_lab import SwitchRefused, session_switch_smaller
from tests.factories import smaller_lab_world


@pytest.fixture
def w(db):
    return smaller_lab_world()


def launch(w, template: str, index: int = 0) -> LabSession:
    if template in ("filler", "other_medium"):
        return session_launch(student=w["other_students"][index], course=w["other_course"], template=w[template])
    return session_launch(student=w["students"][index], course=w["course"], template=w[template])


def queued_big(w, index: int = 0) -> LabSession:
    """The other course's filler runs on the card; the big lab launched after it waits for the card."""
    if not LabSession.objects.filter(template=w["filler"]).exists():
        launch(w, "filler")
        allocation_pass()
    session = launch(w, "big", index)
    allocation_pass()
    session.refresh_from_db()
    assert session.state == "queued"
    return session


def payload(session: LabSession, user) -> dict:
    return session_event_payload(session_for_user(user=user, session_id=session.pk), for_owner=True)


def test_the_pass_offers_the_largest_smaller_template_that_starts_now(w):
    session = queued_big(w)
    assert session.reason_code.startswith("card.")
    assert session.smaller_offer == {"template": w["medium"].pk, "core_percent": 30, "memory_mib": 16384, "cards": 1}
    shown = payload(session, w["students"][0])
    assert shown["smaller_offer"]["template"] == w["medium"].pk
    assert shown["smaller_offer_text"] == "A 30\u00a0% / 16\u00a0GiB lab can start now instead"
    others = session_event_payload(session, for_owner=False)
    assert "smaller_offer" not in others  # the instructor's page offers nothing


def test_the_offer_is_taken_off_when_the_room_goes(w):
    session = queued_big(w)
    launch(w, "other_medium", 1)
    allocation_pass()  # the other course's lab takes 30 % / 16 GiB: 10 % / 8 GiB stay free
    session.refresh_from_db()
    assert session.smaller_offer["template"] == w["small"].pk
    launch(w, "small", 1)
    allocation_pass()  # a small lab takes 10 % of it: no AI Core is left for any template
    session.refresh_from_db()
    assert session.state == "queued" and session.smaller_offer == {}
    assert payload(session, w["students"][0])["smaller_offer"] is None


def test_nothing_is_offered_to_a_session_queued_for_its_courses_quota(w):
    quota = w["course"].quota
    quota.instance_count = 1
    quota.save(update_fields=["instance_count"])
    launch(w, "small", 1)
    allocation_pass()
    session = launch(w, "big")
    allocation_pass()
    session.refresh_from_db()
    assert (session.state, session.reason_code, session.smaller_offer) == ("queued", "quota.instances", {})


def test_nothing_is_offered_when_the_instructor_turned_offers_off_for_the_template(w):
    w["big"].offers_smaller_lab = False
    w["big"].save(update_fields=["offers_smaller_lab"])
    session = queued_big(w)
    assert session.reason_code.startswith("card.") and session.smaller_offer == {}
    assert payload(session, w["students"][0])["smaller_offer"] is None


def test_the_offer_reads_in_chinese():
    from labs.presentation import smaller_offer_text

    with translation.override("zh-hans"):
        text = smaller_offer_text({"template": 1, "core_percent": 10, "memory_mib": 4096, "cards": 1})
    assert text == "现在可以改为启动一个 10\u00a0% / 4\u00a0GiB 的实验环境"


def test_switching_withdraws_the_queued_lab_and_admits_the_smaller_one_at_once(w):
    session = queued_big(w)
    student = w["students"][0]
    switched = session_switch_smaller(session_id=session.pk, student=student, template_id=w["medium"].pk)
    session.refresh_from_db()
    assert session.state == "stopped" and session.ended_at is not None
    assert session.reason == "withdrawn: you switched to the smaller lab medium"
    started = switched.started
    assert (started.state, started.template_id, started.student_id, started.course_id) == (
        "admitted",
        w["medium"].pk,
        student.pk,
        w["course"].pk,
    )
    live = Allocation.objects.filter(released_at__isnull=True)
    assert sorted(live.values_list("session__template__slug", flat=True)) == ["filler", "medium"]
    assert not Allocation.objects.filter(session=session).exists()  # the queued lab held nothing, and holds nothing
    assert LabSession.objects.filter(student=student).count() == 2


def test_a_switch_after_the_room_was_taken_says_so_and_changes_nothing_but_the_offer(w):
    session = queued_big(w)
    launch(w, "other_medium", 1)
    allocation_pass()  # the room medium needed is gone; the page still shows the offer of medium
    with pytest.raises(SwitchRefused, match="no longer fits"):
        session_switch_smaller(session_id=session.pk, student=w["students"][0], template_id=w["medium"].pk)
    session.refresh_from_db()
    assert session.state == "queued" and session.smaller_offer == {}
    assert LabSession.objects.filter(template=w["medium"]).count() == 0
    assert Allocation.objects.filter(released_at__isnull=True).count() == 2


def test_another_students_session_cannot_be_switched(w):
    session = queued_big(w)
    with pytest.raises(SwitchRefused, match="no longer waiting"):
        session_switch_smaller(session_id=session.pk, student=w["students"][1], template_id=w["medium"].pk)
    session.refresh_from_db()
    assert session.state == "queued"


def test_only_a_smaller_template_of_the_course_can_be_switched_to(w):
    session = queued_big(w)
    student = w["students"][0]
    for template in (w["big"], w["filler"]):
        with pytest.raises(SwitchRefused, match="not a smaller lab"):
            session_switch_smaller(session_id=session.pk, student=student, template_id=template.pk)
    with pytest.raises(SwitchRefused, match="not a smaller lab"):
        session_switch_smaller(session_id=session.pk, student=student, template_id=10**9)
    assert LabSession.objects.get(pk=session.pk).state == "queued"


def test_a_template_with_offers_off_cannot_be_switched_from(w):
    session = queued_big(w)
    w["big"].offers_smaller_lab = False
    w["big"].save(update_fields=["offers_smaller_lab"])
    with pytest.raises(SwitchRefused, match="offers no smaller"):
        session_switch_smaller(session_id=session.pk, student=w["students"][0], template_id=w["medium"].pk)


def test_a_session_no_longer_queued_cannot_be_switched(w):
    session = queued_big(w)
    session_switch_smaller(session_id=session.pk, student=w["students"][0], template_id=w["small"].pk)
    with pytest.raises(SwitchRefused, match="no longer waiting"):
        session_switch_smaller(session_id=session.pk, student=w["students"][0], template_id=w["small"].pk)
    assert LabSession.objects.filter(template=w["small"]).count() == 1
