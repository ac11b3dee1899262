"""Host CPU and memory per node in the placement engine (issue 14)."""

from __future__ import annotations

import pytest

from labs.domain.allocation import Placed, Refused, Waiting, allocate
from labs.domain.placement import CardCapacity, Cluster, Instance, LaunchRequest, NodeCapacity, PlacementConfig
from labs.domain.quota import CourseQuota as QuotaRule
from labs.domain.quota import Resources
from labs.domain.reservations import Demand, slot_room
from labs.domain.units import Scenario

GIB = 1024


def node(name: str, *, host_mib: int | None, cpu: int | None = None, instances: tuple[Instance, ...] = ()) -> NodeCapacity:
    cards = tuple(CardCapacity(i, i, 65536, instances=instances if i == 0 else ()) for i in range(8))
    return NodeCapacity(name, cards, cpu_millicores=cpu, host_memory_mib=host_mib)


def request(key: str, *, host_mib: int, cpu: int = 0) -> LaunchRequest:
    return LaunchRequest(key, 1, 1, 5, 4096, cpu_millicores=cpu, host_memory_mib=host_mib)


def test_a_node_never_holds_more_host_memory_than_it_offers() -> None:
    cluster = Cluster([node("n1", host_mib=20 * GIB)])
    placed = 0
    for n in range(10):
        choice = cluster.choose(request(f"r{n}", host_mib=8 * GIB))
        if choice is None:
            break
        cluster.commit(request(f"r{n}", host_mib=8 * GIB), choice)
        placed += 1

    assert placed == 2
    assert cluster.explain(request("x", host_mib=8 * GIB)).render() == (
        "node memory: needs 8 GiB; the most free is 4 GiB on n1"
    )
    cluster.check_invariants()


@pytest.mark.parametrize("index_min_nodes", [0, 100])
def test_the_index_and_the_scan_skip_a_node_without_host_room(index_min_nodes: int) -> None:
    config = PlacementConfig(index_min_nodes=index_min_nodes)
    full = Instance(5, 4096, Scenario.DEVELOPMENT, "old", 1, cpu_millicores=1000, host_memory_mib=10 * GIB)
    cluster = Cluster([node("n1", host_mib=12 * GIB, instances=(full,)), node("n2", host_mib=12 * GIB)], config)

    choice = cluster.choose(request("new", host_mib=4 * GIB))

    assert choice is not None and choice.node.name == "n2"  # binpack would prefer n1's used card


def test_a_node_that_reports_no_host_figures_is_not_limited() -> None:
    cluster = Cluster([node("old-agent", host_mib=None)])

    assert cluster.choose(request("big", host_mib=10_000 * GIB, cpu=10**9)) is not None


def test_a_release_gives_the_host_memory_back_and_a_snapshot_keeps_it() -> None:
    cluster = Cluster([node("n1", host_mib=8 * GIB, cpu=4000)])
    first = request("a", host_mib=8 * GIB, cpu=1000)
    cluster.commit(first, cluster.choose(first))
    again = Cluster(cluster.snapshot())

    assert again.choose(request("b", host_mib=GIB)) is None
    assert again.release("a") is not None
    assert again.choose(request("b", host_mib=GIB)) is not None


def test_the_allocator_refuses_what_no_node_can_ever_hold_and_queues_what_waits_for_room() -> None:
    quotas = {1: QuotaRule(guarantee=Resources(1000, 10**7, 1000), sessions_per_student=10)}
    nodes = [node("n1", host_mib=12 * GIB, instances=(Instance(5, 4096, Scenario.DEVELOPMENT, "h", 1, host_memory_mib=8 * GIB),))]

    decisions = allocate(nodes, [request("too-big", host_mib=16 * GIB), request("later", host_mib=8 * GIB)], quotas, {}, now=0)

    refused, waiting = decisions
    assert isinstance(refused, Refused)
    assert refused.reason.render() == "node memory: needs 16 GiB; the largest node has 12 GiB for lab sessions"
    assert isinstance(waiting, Waiting)
    assert waiting.reason.code == "node.host_memory"
    assert not any(isinstance(d, Placed) for d in decisions)


def test_a_class_reservation_counts_host_memory() -> None:
    nodes = [node("n1", host_mib=64 * GIB)]

    assert slot_room(nodes, Demand(5, 4096, 30, Scenario.DEVELOPMENT, 500, 4 * GIB)) == 16
    assert slot_room(nodes, Demand(5, 4096, 30, Scenario.DEVELOPMENT)) == 30
