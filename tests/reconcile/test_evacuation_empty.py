"""A node emptied for maintenance is "empty" only when its agent, not just the ledger, reports no
instance left: the reconciler records how many instances each agent lists."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from labs.models import LabSession, Node, UsageRecord
from labs.selectors.operations import cluster_state
from labs.services.controller import reconcile_once
from labs.services.evacuation import evacuations_enforce, node_evacuate
from labs.services.reconcile import reconcile
from labs.services.sessions import session_launch
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def until(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reconcile_once()
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("the controller did not get there")


def node_text() -> str:
    return cluster_state()[0].evacuation_text


def test_the_node_is_empty_once_its_agent_lists_no_instance(world, agent, cluster_driver):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    until(lambda: LabSession.objects.get(pk=session.pk).state == "running")
    reconcile()
    assert Node.objects.get(pk=world["node"].pk).instances_reported == 1

    report = node_evacuate(node=world["node"], by=UserFactory(is_superuser=True), minutes=1, reason="plugin upgrade")
    assert node_text() == f"1 lab left, empty at {timezone.localtime(report.deadline):%H:%M}"
    assert evacuations_enforce(now=report.deadline + timedelta(seconds=1)) == [str(session.pk)]
    until(lambda: LabSession.objects.get(pk=session.pk).state == "stopped")
    assert UsageRecord.objects.filter(session=session).count() == 1
    assert node_text() == "no lab left; waiting for the node's agent to report no instance"  # as it last said: 1

    reconcile()

    assert agent.driver.instances() == []
    assert Node.objects.get(pk=world["node"].pk).instances_reported == 0
    assert node_text() == "empty — safe to upgrade the NPU plugin"
