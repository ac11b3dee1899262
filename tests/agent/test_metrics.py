"""/metrics exports per-card and per-instance gauges read from the driver at scrape time."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.agent.helpers import NODE, call

MIB = 1024 * 1024


def scrape(agent) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = call(agent, "GET", "/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def card(samples, name, index):
    return next(v for (n, labels), v in samples.items() if n == name and ("card", str(index)) in labels)


def instance(samples, name, entity_id):
    return next(v for (n, labels), v in samples.items() if n == name and ("entity_id", entity_id) in labels)


@pytest.fixture
def loaded(agent, simulated):
    """A (25 %, 8 GiB) and B (75 %, 16 GiB) on card 0; A busy and using 2 GiB, B idle."""
    simulated.register("A", card_index=0, core_percent=25, memory_mib=8192)
    simulated.register("B", card_index=0, core_percent=75, memory_mib=16384)
    simulated.set_demand("A", 100, memory_used_mib=2048)
    return agent


def test_card_gauges_have_the_right_values(loaded, simulated):
    samples = scrape(loaded)

    assert card(samples, "npu_card_memory_total_bytes", 0) == 65536 * MIB
    assert card(samples, "npu_card_memory_used_bytes", 0) == 2048 * MIB
    assert card(samples, "npu_card_memory_allocated_bytes", 0) == (8192 + 16384) * MIB
    assert card(samples, "npu_card_aicore_utilization_ratio", 0) == 1.0
    assert card(samples, "npu_card_core_allocated_ratio", 0) == 1.0
    assert card(samples, "npu_card_instances", 0) == 2
    assert card(samples, "npu_card_healthy", 0) == 1
    assert card(samples, "npu_card_core_allocated_ratio", 1) == 0.0
    assert card(samples, "npu_card_aicore_utilization_ratio", 1) == 0.0


def test_instance_gauges_have_the_right_values(loaded, simulated):
    samples = scrape(loaded)

    assert instance(samples, "npu_instance_memory_used_bytes", "A") == 2048 * MIB
    assert instance(samples, "npu_instance_memory_limit_bytes", "A") == 8192 * MIB
    assert instance(samples, "npu_instance_memory_limit_bytes", "B") == 16384 * MIB
    assert instance(samples, "npu_instance_core_floor_ratio", "A") == 0.25
    assert instance(samples, "npu_instance_core_floor_ratio", "B") == 0.75
    assert instance(samples, "npu_instance_aicore_utilization_ratio", "A") == 1.0
    assert instance(samples, "npu_instance_aicore_utilization_ratio", "B") == 0.0


def test_gauges_follow_the_driver_between_scrapes(loaded, simulated):
    simulated.set_demand("B", 100)
    simulated.set_card_health(0, False)
    samples = scrape(loaded)

    assert instance(samples, "npu_instance_aicore_utilization_ratio", "A") == 0.25
    assert instance(samples, "npu_instance_aicore_utilization_ratio", "B") == 0.75
    assert card(samples, "npu_card_healthy", 0) == 0

    simulated.unregister("A")
    samples = scrape(loaded)
    assert card(samples, "npu_card_core_allocated_ratio", 0) == 0.75
    assert not any(("entity_id", "A") in labels for _, labels in samples)


def test_samples_carry_node_card_and_die_id_labels(loaded, simulated):
    die_id = simulated.inventory()[0].die_id
    samples = scrape(loaded)

    labels = dict(next(labels for (n, labels) in samples if n == "npu_instance_core_floor_ratio"))
    assert labels == {"node": NODE, "card": "0", "die_id": die_id, "entity_id": "A"}
    card_labels = {labels for (n, labels) in samples if n == "npu_card_healthy"}
    assert (("card", "0"), ("die_id", die_id), ("node", NODE)) in card_labels
    assert len(card_labels) == 8
