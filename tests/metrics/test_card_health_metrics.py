"""/metrics exports each card's temperature, power and memory in use, and each node's versions,
as its agent last reported them; a card that reports none has no sample, never a 0."""

from __future__ import annotations

import pytest

from labs.models import Card, Node
from tests.factories import node_with_cards
from tests.metrics.helpers import scrape, values

MIB = 1024 * 1024


@pytest.fixture
def reported(db):
    node = node_with_cards("n1", cards=3)
    Card.objects.filter(node=node, index=0).update(temperature_celsius=36, power_milliwatts=93_400, memory_used_mib=3379)
    Card.objects.filter(node=node, index=1).update(temperature_celsius=37, power_milliwatts=251_700, memory_used_mib=36211)
    # Card 2: its npu-smi printed NA for power, and no agent has reported its memory yet.
    Card.objects.filter(node=node, index=2).update(temperature_celsius=38)
    Node.objects.filter(pk=node.pk).update(driver_version="24.1.rc3", firmware_version="7.5.0.1.129", npu_smi_version="24.1.rc3")
    node_with_cards("n2", cards=1)  # an agent that predates versions and readings
    return node


def test_each_card_exports_its_temperature_power_and_memory_in_use(reported):
    samples = scrape()

    assert values(samples, "npu_lab_card_temperature_celsius", "node", "card") == {
        ("n1", "0"): 36,
        ("n1", "1"): 37,
        ("n1", "2"): 38,
    }
    assert values(samples, "npu_lab_card_power_watts", "node", "card") == {("n1", "0"): 93.4, ("n1", "1"): 251.7}
    assert values(samples, "npu_lab_card_memory_used_bytes", "node", "card") == {
        ("n1", "0"): 3379 * MIB,
        ("n1", "1"): 36211 * MIB,
    }


def test_each_node_exports_what_it_runs(reported):
    samples = scrape()

    assert values(samples, "npu_lab_node_info", "node", "driver_version", "firmware_version", "npu_smi_version") == {
        ("n1", "24.1.rc3", "7.5.0.1.129", "24.1.rc3"): 1,
        ("n2", "", "", ""): 1,
    }
