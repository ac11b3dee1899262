"""A lab on whole cards where the portal registers instances with the node's agent (local and
simulator drivers): the agent models shares of one card, so the portal does not ask it to hold
a whole-card instance, and neither the controller nor the reconciler sends it a refused call."""

from __future__ import annotations

import logging
import time

from labs.models import RepairEvent
from labs.services.controller import reconcile_once
from labs.services.reconcile import reconcile
from labs.services.sessions import session_launch
from tests.factories import CARD_MIB, TemplateFactory


def test_a_two_card_lab_runs_and_reconciles_to_nothing_without_a_refused_registration(world, agent, cluster_driver, caplog):
    course = world["course"]
    pair = TemplateFactory(institution=course.institution, name="pair", core_percent=100, memory_mib=CARD_MIB, card_count=2)
    course.templates.add(pair)
    caplog.set_level(logging.WARNING, logger="labs")
    session = session_launch(student=world["students"][0], course=course, template=pair)
    for _ in range(100):
        reconcile_once()
        session.refresh_from_db()
        if session.state == "running":
            break
        time.sleep(0.05)
    assert session.state == "running"

    report = reconcile()

    session.refresh_from_db()
    assert session.state == "running"
    assert (report.reregistered, report.sessions_failed, report.residuals_seen) == (0, 0, 0)
    assert not RepairEvent.objects.exists()
    assert agent.driver.instances() == []
    assert [r.getMessage() for r in caplog.records if "register" in r.getMessage()] == []
