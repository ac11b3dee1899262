"""A lab that waits because every node that could take it is drained for maintenance is told the
servers are closed for maintenance, not that no healthy card is available."""

from __future__ import annotations

import dataclasses

import pytest

from labs.domain.allocation import Waiting, allocate
from labs.domain.placement import Cluster, NodeCapacity
from labs.domain.reasons import Reason
from tests.domain.test_engine import UNLIMITED, node, req

CLOSED = Reason.of("capacity.maintenance")


def drained(name, **extra) -> NodeCapacity:
    return dataclasses.replace(node(name, **extra), available=False, maintenance=True)


def test_every_node_drained_closes_the_servers_for_maintenance():
    decisions = allocate([drained("a"), drained("b")], [req("r")], {1: UNLIMITED}, {}, now=0)

    assert decisions == [Waiting("r", CLOSED)]
    assert str(decisions[0].reason) == "the NPU servers are closed for maintenance"


def test_the_nodes_a_lab_could_take_all_drained_close_them_for_it():
    nodes = [drained("a", labels={"pool": "teaching"}), node("b", labels={"pool": "research"})]

    decisions = allocate(nodes, [req("r", node_selector=(("pool", "teaching"),))], {1: UNLIMITED}, {}, now=0)

    assert decisions == [Waiting("r", CLOSED)]


def test_a_node_that_is_down_but_not_drained_is_no_maintenance():
    nodes = [drained("a"), node("b", available=False)]

    decisions = allocate(nodes, [req("r")], {1: UNLIMITED}, {}, now=0)

    assert decisions == [Waiting("r", Reason.of("capacity.no_healthy_card"))]


def test_drained_nodes_with_no_healthy_card_are_no_maintenance_either():
    sick = {i: False for i in range(8)}

    decisions = allocate([drained("a", healthy=sick)], [req("r")], {1: UNLIMITED}, {}, now=0)

    assert decisions == [Waiting("r", Reason.of("capacity.no_healthy_card"))]


def test_a_drained_node_is_kept_through_a_snapshot_and_cannot_be_available():
    cluster = Cluster([drained("a"), node("b")])

    assert [n.maintenance for n in cluster.snapshot()] == [True, False]
    with pytest.raises(ValueError, match="under maintenance is not available"):
        dataclasses.replace(node("a"), maintenance=True)
