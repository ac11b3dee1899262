import pytest

from labs.domain.reasons import Reason
from labs.models import LabSession
from labs.services.sessions import LaunchRefused, session_launch
from tests.factories import TemplateFactory, UserFactory


def test_a_launch_creates_a_queued_session_that_says_why_it_waits(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    assert session.state == "queued"
    assert session.reason == "waiting for the allocation pass"
    assert len(session.secret) >= 40


def test_every_session_gets_its_own_secret(world):
    a = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    b = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    assert a.secret != b.secret


def test_a_student_not_enrolled_is_refused_and_nothing_is_created(world):
    outsider = UserFactory(username="outsider")
    with pytest.raises(LaunchRefused, match="not enrolled"):
        session_launch(student=outsider, course=world["course"], template=world["small"])
    assert LabSession.objects.count() == 0


def test_a_template_not_offered_in_the_course_is_refused(world):
    other = TemplateFactory(institution=world["course"].institution, name="huge", slug="huge")
    with pytest.raises(LaunchRefused, match="huge is not offered"):
        session_launch(student=world["students"][0], course=world["course"], template=other)
    assert LabSession.objects.count() == 0


def test_a_course_without_quota_is_refused_with_a_hint(world):
    world["course"].quota.delete()
    with pytest.raises(LaunchRefused, match="has no NPU quota yet; ask your instructor"):
        session_launch(student=world["students"][0], course=world["course"], template=world["small"])


def test_a_student_at_the_concurrent_limit_is_refused_until_one_ends(world):
    student = world["students"][0]
    first = session_launch(student=student, course=world["course"], template=world["small"])
    with pytest.raises(LaunchRefused, match="already have 1 of 1 sessions open"):
        session_launch(student=student, course=world["course"], template=world["medium"])
    assert LabSession.objects.filter(student=student).count() == 1
    from labs.services.sessions import session_stop

    assert session_stop(session_id=first.pk, reason=Reason.of("session.stopped_by", who="tester"))
    session_launch(student=student, course=world["course"], template=world["medium"])
