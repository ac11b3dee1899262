"""The isolation self-test report: stored on the session, judged against the share's cap."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from labs.domain.reasons import Reason
from labs.drivers import get_driver
from labs.models import AuditEvent, Card, LabSession, RepairEvent
from labs.services.controller import reconcile_once
from labs.services.selftest import card_clear_isolation_suspect, selftest_record, selftests_record
from labs.services.sessions import session_launch, session_stop


@pytest.fixture
def running(world):
    driver = get_driver()
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    reconcile_once()
    session.refresh_from_db()
    yield session
    for session_id in driver.list():
        driver.delete(session_id)


def post(session, body, *, secret=None, raw=None):
    return Client(enforce_csrf_checks=True).post(
        reverse("labs:session-selftest", args=[session.pk]),
        data=raw if raw is not None else json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret if secret is not None else session.secret}"},
    )


def state(session):
    session.refresh_from_db()
    card = Card.objects.get(pk=session.allocation.card_id)
    return (
        session.selftest_visible_mib,
        session.selftest_probe_exceeded,
        session.selftest_over_cap,
        card.isolation_suspect,
        RepairEvent.objects.filter(kind="isolation_breach").count(),
    )


def test_a_lab_within_its_cap_is_stored_and_not_flagged(running):
    response = post(running, {"visible_mib": 4096, "probe_exceeded": False})

    assert response.status_code == 200, response.content
    assert response.json()["over_cap"] is False and response.json()["cap_mib"] == 4096
    assert state(running) == (4096, False, False, False, 0)


def test_a_lab_that_sees_more_than_its_cap_flags_the_session_and_the_card_once(running):
    response = post(running, {"visible_mib": 24576})
    post(running, {"visible_mib": 24576})

    assert response.status_code == 200 and response.json()["over_cap"] is True
    assert state(running) == (24576, None, True, True, 1)
    event = RepairEvent.objects.get(kind="isolation_breach")
    assert event.session_id == running.pk and "24576 MiB" in event.message and "4096 MiB" in event.message


def test_a_probe_that_allocated_past_the_cap_is_a_breach_even_when_the_visible_memory_is_the_cap(running):
    post(running, {"visible_mib": 4096, "probe_exceeded": True})

    assert state(running) == (4096, True, True, True, 1)


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"secret": "not-the-secret", "body": {"visible_mib": 99999}}, 404),
        ({"secret": " ", "body": {"visible_mib": 99999}}, 401),
        ({"raw": "{not json", "body": None}, 400),
        ({"body": ["visible_mib", 99999]}, 400),
        ({"body": {"visible_mib": "lots"}}, 400),
        ({"body": {"visible_mib": -1}}, 400),
        ({"body": {"visible_mib": 10**30}}, 400),
        ({"body": {"visible_mib": True}}, 400),
        ({"body": {"visible_mib": 99999, "probe_exceeded": "yes"}}, 400),
    ],
)
def test_a_bad_report_gets_a_clear_4xx_and_changes_nothing(running, kwargs, status):
    body = kwargs.pop("body")
    before = state(running)
    response = post(running, body, **kwargs)

    assert response.status_code == status
    assert response.json()["error"]
    assert state(running) == before == (4096, None, False, False, 0)


def test_an_ended_session_takes_no_report(running):
    session_stop(session_id=running.pk, reason=Reason.of("session.stopped_by", who="student000"))
    for _ in range(3):
        reconcile_once()
    running.refresh_from_db()
    assert running.state in ("stopped", "failed")

    response = post(running, {"visible_mib": 99999})

    assert response.status_code in (404, 409)
    assert LabSession.objects.get(pk=running.pk).selftest_over_cap is False


def test_an_operator_clears_the_suspect_mark_and_it_is_audited(running, world):
    selftest_record(session_id=str(running.pk), secret=running.secret, visible_mib=65536)
    card = Card.objects.get(pk=running.allocation.card_id)

    assert card_clear_isolation_suspect(card=card, by=world["instructor"]) is True
    assert card_clear_isolation_suspect(card=card, by=world["instructor"]) is False
    card.refresh_from_db()
    assert card.isolation_suspect is False
    assert AuditEvent.objects.filter(action="card.isolation_cleared").count() == 1


def test_where_the_runtime_reports_the_whole_card_only_the_probe_is_judged(running, monkeypatch):
    driver = get_driver()
    monkeypatch.setattr(type(driver), "memory_seen", lambda self, labels: "card")

    post(running, {"visible_mib": 65536, "probe_exceeded": False})
    assert state(running) == (65536, False, False, False, 0)

    post(running, {"visible_mib": 65536, "probe_exceeded": True})
    assert state(running) == (65536, True, True, True, 1)


def test_the_simulator_reports_each_started_labs_self_test_its_cap(running):
    assert state(running) == (4096, None, False, False, 0)


def test_a_leaky_simulated_lab_that_sees_the_whole_card_flags_the_session_and_the_card(world):
    template = world["small"]
    template.image = "leaky:jupyter/base"
    template.save(update_fields=["image"])
    session = session_launch(student=world["students"][1], course=world["course"], template=template)
    try:
        reconcile_once()
        session.refresh_from_db()
        card = session.allocation.card
        assert state(session) == (card.memory_mib, None, True, True, 1)
    finally:
        get_driver().delete(str(session.pk))


def test_many_reports_at_once_are_judged_as_one_is(world, monkeypatch):
    """``selftests_record`` (the controller's path for simulated labs): each session judged as
    ``selftest_record`` judges one; a first breach flags the card once, an ended session is left out."""
    students, course, small = world["students"], world["course"], world["small"]
    sessions = [session_launch(student=s, course=course, template=small) for s in students[:3]]
    reconcile_once()
    within, over, ended = sessions
    session_stop(session_id=ended.pk, reason=Reason.of("session.stopped_by", who="test"))
    reconcile_once()
    reconcile_once()
    ended.refresh_from_db()
    assert ended.state == "stopped"
    cap = 4096
    verdicts = selftests_record({str(within.pk): cap, str(over.pk): cap + 1, str(ended.pk): cap + 1})
    assert sorted((v.session_id, v.cap_mib, v.visible_mib, v.over_cap) for v in verdicts) == sorted(
        [(str(within.pk), cap, cap, False), (str(over.pk), cap, cap + 1, True)]
    )
    assert state(within)[:3] == (cap, None, False)
    assert state(over) == (cap + 1, None, True, True, 1)
    ended.refresh_from_db()
    assert ended.selftest_visible_mib == cap  # the report before it ended, from its start

    # Reported again within the cap: still flagged (an operator clears it), no second breach.
    selftests_record({str(over.pk): cap})
    assert state(over) == (cap, None, True, True, 1)

    # Where the runtime reports the whole card, seeing more than the cap is no breach.
    monkeypatch.setattr(type(get_driver()), "memory_seen", lambda self, labels: "card")
    selftests_record({str(within.pk): 65536})
    assert state(within)[:3] == (65536, None, False)
    for session_id in get_driver().list():
        get_driver().delete(session_id)
