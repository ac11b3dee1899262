"""A student lengthens a running session from its card, as often as the course allows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from labs.domain.states import SessionState
from labs.models import LabSession
from labs.selectors.sessions import session_event_payload
from labs.services.allocation import allocation_pass
from labs.services.controller.rounds import _desired
from labs.services.sessions import ExtendRefused, session_extend, session_launch, session_transition

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(world):
    quota = world["course"].quota
    quota.extensions_allowed, quota.extension_minutes, quota.max_session_minutes = 2, 30, 60
    quota.save()
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    assert session_transition(session.pk, to=SessionState.STARTING)
    assert session_transition(session.pk, to=SessionState.RUNNING, access_url="http://lab/")
    LabSession.objects.filter(pk=session.pk).update(running_at=timezone.now() - timedelta(minutes=50))
    return session


def reload(session):
    return LabSession.objects.select_related("course__quota", "template", "student").get(pk=session.pk)


def deadline_of(session) -> float:
    (desired,) = [d for d in _desired() if d.session_id == str(session.pk)]
    return desired.expires_at


def test_each_extension_moves_the_deadline_the_controller_enforces_and_the_card_shows(world, running):
    before = deadline_of(running)
    payload = session_event_payload(reload(running), for_owner=True)
    assert (payload["extensions_left"], payload["extend_label"]) == (2, "Add 30 minutes")

    assert session_extend(session_id=running.pk, student=world["students"][0]) == 1

    assert deadline_of(running) == before + 30 * 60
    payload = session_event_payload(reload(running), for_owner=True)
    assert payload["stops_at"] == datetime.fromtimestamp(before + 1800, tz=UTC).isoformat()
    assert payload["extensions_left"] == 1
    assert session_event_payload(reload(running), for_owner=False)["extensions_left"] == 0  # the instructor's view

    assert session_extend(session_id=running.pk, student=world["students"][0]) == 0
    with pytest.raises(ExtendRefused, match="all 2 extensions the course allows"):
        session_extend(session_id=running.pk, student=world["students"][0])
    assert reload(running).extensions_used == 2 and deadline_of(running) == before + 60 * 60


def test_an_extension_is_refused_with_the_reason_and_changes_nothing(world, running):
    other = world["students"][1]
    with pytest.raises(ExtendRefused, match="Only a running session"):
        session_extend(session_id=running.pk, student=other)  # not theirs
    LabSession.objects.filter(pk=running.pk).update(reclaim_at=timezone.now() + timedelta(minutes=5))
    with pytest.raises(ExtendRefused, match="needs this session's capacity back"):
        session_extend(session_id=running.pk, student=world["students"][0])
    LabSession.objects.filter(pk=running.pk).update(reclaim_at=None)
    world["course"].quota.extensions_allowed = 0
    world["course"].quota.save()
    with pytest.raises(ExtendRefused, match="allows no extensions"):
        session_extend(session_id=running.pk, student=world["students"][0])
    assert reload(running).extensions_used == 0


def test_the_extend_endpoint_is_the_owner_s_only_and_csrf_protected(world, running):
    owner, other = Client(), Client()
    owner.force_login(world["students"][0])
    other.force_login(world["students"][1])
    url = f"/sessions/{running.pk}/extend/"

    assert other.post(url, HTTP_ACCEPT="application/json").status_code == 404
    assert owner.get(url).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world["students"][0])
    assert strict.post(url, HTTP_ACCEPT="application/json").status_code == 403
    assert reload(running).extensions_used == 0

    answer = owner.post(url, HTTP_ACCEPT="application/json")
    assert answer.status_code == 200 and answer.json() == {"ok": True, "extensions_left": 1}
    owner.post(url, HTTP_ACCEPT="application/json")
    refused = owner.post(url, HTTP_ACCEPT="application/json")
    assert refused.status_code == 409 and "all 2 extensions" in refused.json()["error"]
    page = owner.post(url, follow=True).content.decode()  # without JavaScript: back to the page with the reason
    assert "all 2 extensions" in page


def test_the_instructor_sets_extensions_in_the_quota_form(world):
    instructor = Client()
    instructor.force_login(world["instructor"])
    url = f"/courses/{world['course'].pk}/quota/"
    base = {"instance_count": 8, "core_percent": 80, "memory_mib": "32", "sessions_per_student": 1, "max_session_minutes": 60}
    instructor.post(url, {**base, "extensions_allowed": 3, "extension_minutes": 45})
    quota = type(world["course"].quota).objects.get(course=world["course"])
    assert (quota.extensions_allowed, quota.extension_minutes) == (3, 45)
    bad = instructor.post(url, {**base, "extensions_allowed": -1, "extension_minutes": 0})
    assert bad.status_code == 200 and bad.context["form"].errors.keys() == {"extensions_allowed", "extension_minutes"}
    instructor.post(url, base)  # left empty: none, 30 minutes
    quota.refresh_from_db()
    assert (quota.extensions_allowed, quota.extension_minutes) == (0, 30)
