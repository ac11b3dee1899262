"""The cluster page's counts: drained, unready and unanswering nodes apart, and their cards as
taking no new session."""

from __future__ import annotations

import pytest

from labs.domain.reasons import Reason
from labs.models import Card, Node
from labs.selectors.operations import cluster_state, cluster_summary
from tests.factories import node_with_cards

pytestmark = pytest.mark.django_db


def not_ready(node: Node) -> None:
    reason = Reason.of("readiness.driver_too_old", version="24.1.rc3", profile="FlexNPU", minimum="25.2.0")
    Node.objects.filter(pk=node.pk).update(readiness_code=reason.code, readiness_params=reason.to_json()["params"])


def test_drained_unready_and_unanswering_nodes_are_counted_each_once():
    nodes = [node_with_cards(f"n{i}", cards=2) for i in range(8)]
    Node.objects.filter(pk__in=[nodes[0].pk, nodes[1].pk]).update(drained=True, available=False)
    not_ready(nodes[1])  # drained and unready: counted as drained
    not_ready(nodes[2])
    Node.objects.filter(pk=nodes[3].pk).update(available=False, unavailable_reason="agent unreachable")
    Card.objects.filter(node=nodes[4], index=0).update(disabled=True)

    summary = cluster_summary(cluster_state())

    assert (summary.nodes, summary.drained, summary.unready, summary.unanswering) == (8, 2, 1, 1)
    assert (summary.cards, summary.cards_full, summary.cards_not_taking) == (16, 0, 9)
    assert not summary.every_node_takes_labs
    words = summary.to_json()
    assert words["nodes_text"] == "2 of 8 nodes drained, 1 not ready, 1 not answering: they take no new labs."
    assert words["cards_text"] == "16 cards: 0 full, 9 not taking sessions."
    assert "drained, unready or unanswering" in words["nothing_stranded"]


def test_a_cluster_whose_nodes_all_take_labs_says_so():
    node_with_cards("n1", cards=2)
    node_with_cards("n2", cards=2)

    summary = cluster_summary(cluster_state())

    assert summary.every_node_takes_labs
    assert summary.to_json()["nodes_text"] == "2 nodes, all taking labs."
    assert summary.to_json()["nothing_stranded"].startswith("Nothing is stranded: every card")
