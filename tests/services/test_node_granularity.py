"""Pools whose device plugin picks the card without telling: the ledger at node granularity.

The ledger's card is only a packing there. Each card's measured memory (the agent's HBM use)
is checked against it: the allocation pass charges a card what it holds beyond the ledger,
the reconciler records it, and pages show the node alone.
"""

from __future__ import annotations

import pytest
from django.utils import translation

from labs.domain.placement import Instance
from labs.domain.units import Scenario
from labs.models import Allocation, Card, Node
from labs.selectors.capacity import capacity_snapshot, memory_beyond_ledger, unlisted_memory
from labs.selectors.sessions import session_event_payload
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch

GIB = 1024


def test_memory_beyond_the_ledger_is_rounded_up_to_the_grid_and_nothing_when_unmeasured():
    assert memory_beyond_ledger(None, 0) == 0
    assert memory_beyond_ledger(0, 4 * GIB) == 0
    assert memory_beyond_ledger(4 * GIB, 4 * GIB) == 0
    assert memory_beyond_ledger(4 * GIB + 1, 4 * GIB) == 128
    assert memory_beyond_ledger(99 * GIB, 4 * GIB) == 95 * GIB  # not capped: the reconciler reports all of it


def test_unlisted_memory_is_the_measured_excess_on_the_128_mib_grid_and_capped_by_the_card():
    listed = (Instance(5, 4 * GIB, Scenario.DEVELOPMENT, "a"),)
    assert unlisted_memory(64 * GIB, listed, None) == 0
    assert unlisted_memory(64 * GIB, listed, 3 * GIB) == 0  # within what the ledger lists
    assert unlisted_memory(64 * GIB, listed, 4 * GIB + 1) == 128
    assert unlisted_memory(64 * GIB, listed, 10 * GIB) == 6 * GIB
    assert unlisted_memory(64 * GIB, listed, 99 * GIB) == 60 * GIB  # never past what the card has left


def test_the_snapshot_charges_measured_memory_only_where_nobody_reports_the_card(world):
    Card.objects.filter(node=world["node"], index=0).update(memory_used_mib=40 * GIB)
    assert capacity_snapshot()[0].cards[0].unlisted_mib == 0  # reported: the ledger follows the node

    Node.objects.filter(pk=world["node"].pk).update(card_truth=Node.CardTruth.NONE)
    assert capacity_snapshot()[0].cards[0].unlisted_mib == 40 * GIB


def test_the_allocation_pass_keeps_off_a_card_that_holds_more_than_the_ledger_says(world):
    Node.objects.filter(pk=world["node"].pk).update(card_truth=Node.CardTruth.NONE)
    # The device plugin put something on every card but card 5: each holds 62 GiB the ledger never listed.
    Card.objects.filter(node=world["node"]).exclude(index=5).update(memory_used_mib=62 * GIB)
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])

    assert allocation_pass().admitted == [str(session.pk)]
    assert Allocation.objects.get(session=session).card.index == 5


def test_with_every_card_full_in_measurement_the_session_waits_with_the_reason(world):
    Node.objects.filter(pk=world["node"].pk).update(card_truth=Node.CardTruth.NONE)
    Card.objects.filter(node=world["node"]).update(memory_used_mib=62 * GIB)
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])

    result = allocation_pass()

    session.refresh_from_db()
    assert result.admitted == [] and session.state == "queued"
    assert "the most free on a healthy card is 2 GiB" in session.reason  # the most free memory on any card


@pytest.mark.parametrize(
    ("language", "truth", "expected"),
    [
        ("en", "reported", "n1 / NPU 0"),
        ("en", "none", "n1 / NPU picked by the device plugin"),
        ("zh-hans", "reported", "n1 / NPU 0"),
        ("zh-hans", "none", "n1 / NPU 由设备插件选定"),
    ],
)
def test_pages_show_the_node_alone_where_the_card_is_not_known(world, language, truth, expected):
    Node.objects.filter(pk=world["node"].pk).update(card_truth=truth)
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    session.refresh_from_db()
    with translation.override(language):
        assert session_event_payload(session, for_owner=True)["placement"] == expected
