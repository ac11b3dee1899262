"""Memory a card's agent measured beyond what the ledger lists there (node-granularity pools).

Where the device plugin picks the card and nothing reports it, the ledger's card is a packing;
a card that holds more than the packing says must not be offered the difference.
"""

from __future__ import annotations

import pytest

from labs.domain.placement import CardCapacity, Cluster, Instance, NodeCapacity
from tests.domain.test_engine import DEV, GIB, req


def two_cards(unlisted0=0, unlisted1=0, instances0=()):
    return NodeCapacity(
        "n",
        (
            CardCapacity(1, 0, 64 * GIB, instances=tuple(instances0), unlisted_mib=unlisted0),
            CardCapacity(2, 1, 64 * GIB, unlisted_mib=unlisted1),
        ),
    )


def test_unlisted_memory_is_used_memory_for_placement():
    cluster = Cluster([two_cards(unlisted0=60 * GIB)])
    choice = cluster.choose(req("r", memory=8 * GIB))
    assert [c.index for c in choice.cards] == [1]  # card 0 has only 4 GiB left


def test_a_request_no_card_can_take_is_explained_with_the_measured_memory():
    cluster = Cluster([two_cards(unlisted0=60 * GIB, unlisted1=60 * GIB)])
    assert cluster.choose(req("r", memory=8 * GIB)) is None
    reason = cluster.explain(req("r", memory=8 * GIB))
    assert "4 GiB" in reason.render()  # the most free memory on any card


def test_unlisted_memory_is_no_instance_and_no_ai_core():
    cluster = Cluster([two_cards(unlisted0=8 * GIB)])
    card = cluster.nodes[0].cards[0]
    assert (card.count, card.core_used, card.memory_used) == (0, 0, 8 * GIB)
    # It takes no instance slot: a card may still hold 16 instances beside it.
    for i in range(16):
        choice = cluster.choose(req(f"r{i}", core=5, memory=2 * GIB))
        cluster.commit(req(f"r{i}", core=5, memory=2 * GIB), choice)
    cluster.check_invariants()
    assert cluster.nodes[0].cards[0].count == 16


def test_a_card_with_unlisted_memory_is_not_empty_for_a_whole_card_request():
    cluster = Cluster([two_cards(unlisted1=GIB)])
    assert cluster.choose(req("whole", core=100, memory=64 * GIB, cards=2)) is None
    assert "whole" not in cluster


def test_unlisted_memory_survives_a_snapshot_round_trip():
    source = [two_cards(unlisted0=3 * GIB, instances0=[Instance(10, 8 * GIB, DEV, key="a")])]
    cluster = Cluster(source)
    again = Cluster(cluster.snapshot())
    assert again.snapshot() == cluster.snapshot() == source
    assert again.nodes[0].cards[0].memory_used == 11 * GIB
    again.release("a")
    assert again.nodes[0].cards[0].memory_used == 3 * GIB


@pytest.mark.parametrize("bad", [-1, 65 * GIB, 1.5, True])
def test_unlisted_memory_out_of_range_is_refused(bad):
    with pytest.raises((ValueError, TypeError), match="unlisted_mib"):
        CardCapacity(1, 0, 64 * GIB, unlisted_mib=bad)
