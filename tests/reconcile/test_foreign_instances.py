"""Residual instances by the vendor's rule: an entity-id is residual only when no pod has its UID.

The CCE FlexNPU guide: "若发现存在entity-id但不存在Pod的UID，则说明此NPU虚拟化设备为残留设备". A pod
the portal did not make (a researcher's job on the same server) holds an instance too; the
reconciler reports it to operators and never unregisters it.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from labs.drivers import get_driver
from labs.models import Node, RepairEvent, ResidualCandidate
from labs.services.reconcile import reconcile
from tests.reconcile.test_reconcile import running_session


def entity_ids(agent) -> set[str]:
    return {i.entity_id for i in agent.driver.instances()}


def test_an_instance_of_a_foreign_pod_is_left_alone_and_reported_once(world, agent, cluster_driver, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 0
    live = running_session(world)
    foreign = cluster_driver.foreign_pod_add(world["node"].name, "research/train-0")
    agent.driver.register(entity_id=foreign, card_index=2, core_percent=20, memory_mib=16384)

    first = reconcile()
    second = reconcile()

    assert entity_ids(agent) == {live.driver_ref, foreign}
    assert (first.foreign_seen, second.foreign_seen) == (1, 0)
    assert first.residuals_unregistered == second.residuals_unregistered == 0
    event = RepairEvent.objects.get()
    assert (event.kind, event.node, event.entity_id) == ("foreign_instance", world["node"], foreign)
    assert "research/train-0" in event.message
    assert not ResidualCandidate.objects.exists()
    live.refresh_from_db()
    assert live.state == "running"


def test_after_the_grace_window_only_the_instance_whose_pod_exists_nowhere_is_unregistered(
    world, agent, cluster_driver, settings
):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    live = running_session(world)
    foreign = cluster_driver.foreign_pod_add(world["node"].name)
    residual = str(uuid.uuid4())  # a force-deleted pod left this behind
    agent.driver.register(entity_id=foreign, card_index=2, core_percent=20, memory_mib=16384)
    agent.driver.register(entity_id=residual, card_index=3, core_percent=10, memory_mib=8192)

    first = reconcile()
    assert (first.residuals_seen, first.residuals_unregistered) == (1, 0)
    assert list(ResidualCandidate.objects.values_list("entity_id", flat=True)) == [residual]

    ResidualCandidate.objects.update(first_seen_at=timezone.now() - timedelta(seconds=301))
    second = reconcile()

    assert second.residuals_unregistered == 1
    assert entity_ids(agent) == {live.driver_ref, foreign}
    kinds = list(RepairEvent.objects.order_by("id").values_list("kind", "entity_id"))
    assert kinds == [("foreign_instance", foreign), ("residual_seen", residual), ("residual_unregistered", residual)]


def test_once_the_foreign_pod_is_gone_its_leftover_instance_is_a_residual_like_any_other(world, agent, cluster_driver, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 300
    foreign = cluster_driver.foreign_pod_add(world["node"].name)
    agent.driver.register(entity_id=foreign, card_index=2, core_percent=20, memory_mib=16384)
    reconcile()
    cluster_driver.foreign_pod_remove(foreign)  # force-deleted: FlexNPU kept its instance

    assert reconcile().residuals_seen == 1
    ResidualCandidate.objects.update(first_seen_at=timezone.now() - timedelta(seconds=301))
    assert reconcile().residuals_unregistered == 1

    assert entity_ids(agent) == set()


def test_a_pod_on_another_node_does_not_keep_an_instance_here(world, agent, cluster_driver, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 0
    elsewhere = cluster_driver.foreign_pod_add("another-node")
    agent.driver.register(entity_id=elsewhere, card_index=2, core_percent=20, memory_mib=16384)

    report = reconcile()

    assert (report.foreign_seen, report.residuals_unregistered) == (0, 1)
    assert entity_ids(agent) == set()


def test_nothing_is_unregistered_where_the_cluster_names_the_node_otherwise(world, agent, cluster_driver, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 0
    live = running_session(world)
    residual = str(uuid.uuid4())
    agent.driver.register(entity_id=residual, card_index=3, core_percent=10, memory_mib=8192)
    # The portal's node is named otherwise than the cluster's: the driver lists no pod under this
    # name, not even the running lab's, so the list says nothing about what is residual here.
    Node.objects.filter(pk=world["node"].pk).update(name="n1.example.edu")

    report = reconcile()

    assert report.pods_unknown == ["n1.example.edu"]
    assert report.residuals_unregistered == 0
    assert entity_ids(agent) == {live.driver_ref, residual}


@pytest.fixture
def unreachable_cluster(settings):
    """The Kubernetes driver aimed at an API server that is not there."""
    settings.LAB_DRIVER = {
        "BACKEND": "labs.drivers.kubernetes.KubernetesDriver",
        "OPTIONS": {"api_url": "http://127.0.0.1:9", "retries": 0, "request_timeout_seconds": 1},
    }
    get_driver.cache_clear()
    yield
    get_driver.cache_clear()


def test_nothing_is_unregistered_on_a_node_whose_pods_cannot_be_read(world, agent, unreachable_cluster, settings):
    settings.LAB_RESIDUAL_GRACE_SECONDS = 0
    settings.LAB_AGENT_REGISTERS_INSTANCES = False  # Kubernetes: the device plugin registers
    residual = str(uuid.uuid4())
    agent.driver.register(entity_id=residual, card_index=3, core_percent=10, memory_mib=8192)

    report = reconcile()

    assert report.pods_unknown == [world["node"].name]
    assert report.residuals_unregistered == 0
    assert entity_ids(agent) == {residual}
    assert not RepairEvent.objects.exists()
