"""The reconciler on a pool whose device plugin picks the card unseen (HAMi): node granularity."""

from __future__ import annotations

import uuid

import pytest

from labs.drivers import get_driver
from labs.models import Card, Node, RepairEvent
from labs.selectors.capacity import capacity_snapshot
from labs.services.reconcile import reconcile

GIB = 1024


@pytest.fixture
def hami_cluster(settings):
    settings.LAB_DRIVER = {
        "BACKEND": "labs.drivers.kubernetes.KubernetesDriver",
        "OPTIONS": {"api_url": "http://127.0.0.1:9", "profile": "flexnpu", "pool_profiles": "pool=hami:hami"},
    }
    get_driver.cache_clear()
    yield
    get_driver.cache_clear()


def test_a_node_in_a_hami_pool_is_kept_at_node_granularity_and_its_cards_checked(world, agent, hami_cluster, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    node = world["node"]
    node.labels = {"pool": "hami"}
    node.save(update_fields=["labels"])
    # Something the ledger does not list holds 20 GiB of card 2.
    agent.driver.register(entity_id=str(uuid.uuid4()), card_index=2, core_percent=10, memory_mib=24 * GIB)
    agent.driver.set_demand(agent.driver.instances()[0].entity_id, 0, memory_used_mib=20 * GIB)

    report = reconcile()

    node.refresh_from_db()
    assert node.card_truth == "none"
    assert Card.objects.get(node=node, index=2).memory_used_mib == 20 * GIB
    assert report.cards_over == 1
    events = RepairEvent.objects.filter(node=node)
    assert events.filter(kind="card_changed", message__contains="node granularity").count() == 1
    totals = events.get(kind="card_totals")
    assert "card 2: 20480 MiB in use, 0 MiB listed" in totals.message
    assert capacity_snapshot()[0].cards[2].unlisted_mib == 20 * GIB

    assert reconcile().cards_over == 1
    assert RepairEvent.objects.filter(node=node, kind="card_totals").count() == 1  # once per window


def test_a_node_back_in_a_flexnpu_pool_reports_the_card_again(world, agent, hami_cluster):
    node = world["node"]
    Node.objects.filter(pk=node.pk).update(card_truth="none")
    Card.objects.filter(node=node).update(memory_used_mib=30 * GIB)

    report = reconcile()

    node.refresh_from_db()
    assert node.card_truth == "reported" and report.cards_over == 0
    assert capacity_snapshot()[0].cards[0].unlisted_mib == 0
    assert not RepairEvent.objects.filter(kind="card_totals").exists()
    assert Card.objects.get(node=node, index=0).memory_used_mib == 0  # what the agent measures now
