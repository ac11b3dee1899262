"""A node holds its cards times the per-card cap, but never more than the per-node cap (CCE FlexNPU guide)."""

from __future__ import annotations

import pytest

from labs.domain.units import Scenario, node_instance_slots


@pytest.mark.parametrize(
    ("cards", "development", "inference"),
    [(0, 0, 0), (1, 16, 8), (4, 64, 32), (8, 128, 64), (16, 128, 64)],
)
def test_a_node_holds_16_or_8_a_card_and_at_most_128_or_64_in_all(cards, development, inference):
    assert node_instance_slots(cards, Scenario.DEVELOPMENT) == development
    assert node_instance_slots(cards, Scenario.INFERENCE) == inference


@pytest.mark.parametrize("cards", [-1, 1.5, "8", True])
def test_a_card_count_that_is_not_a_whole_number_is_refused(cards):
    with pytest.raises(ValueError, match="cards must be a whole number"):
        node_instance_slots(cards, Scenario.DEVELOPMENT)
