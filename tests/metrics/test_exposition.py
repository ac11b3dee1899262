"""labs.exposition writes the Prometheus text format byte for byte as prometheus_client's generate_latest does."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from labs.exposition import Family, render

ODD_VALUES = ["plain", 'with "quotes"', "back\\slash", "new\nline", "中文 節点", ""]


def families() -> list[Family]:
    cards = Family("npu_lab_x_ratio", "gauge", "A gauge with two labels\nand a \\ in its help", ("node", "card"))
    for i, name in enumerate(ODD_VALUES):
        cards.add((name, str(i)), i / 7)
    also = Family("npu_lab_y_bytes", "gauge", "Same labels, another family", ("node", "card"))
    for i, name in enumerate(ODD_VALUES):
        also.add((name, str(i)), i * 1024**3)
    counter = Family("npu_lab_z_total", "counter", "A counter", ("kind",))
    counter.add(("a",), 3)
    counter.add(("b",), 0)
    bare = Family("npu_lab_bare_total", "counter", "No labels")
    bare.add((), 12)
    special = Family("npu_lab_special", "gauge", "Odd numbers", ("which",))
    for which, value in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("big", 1.5e12), ("tiny", 1e-9)):
        special.add((which,), value)
    empty = Family("npu_lab_empty", "gauge", "No samples", ("quantile",))
    return [cards, also, counter, bare, special, empty]


def as_prometheus_client(family: Family):
    if family.type == "counter":
        metric = CounterMetricFamily(family.name, family.help, labels=family.labels)
    else:
        metric = GaugeMetricFamily(family.name, family.help, labels=family.labels)
    for values, value in family.samples:
        metric.add_metric(list(values), value)
    return metric


def test_the_output_is_what_generate_latest_writes():
    class Collector:
        def collect(self):
            return [as_prometheus_client(f) for f in families()]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())

    assert render(families()) == generate_latest(registry)


@pytest.mark.parametrize(
    ("name", "kind", "labels", "message"),
    [
        ("npu-lab", "gauge", (), "not a Prometheus metric name"),
        ("npu_lab_events", "counter", (), "ends in _total"),
        ("npu_lab_x", "histogram", (), "not gauge or counter"),
        ("npu_lab_x", "gauge", ("bad-label",), "not label names"),
        ("npu_lab_x", "gauge", ("__reserved",), "not label names"),
    ],
)
def test_a_family_that_prometheus_would_not_read_is_refused(name, kind, labels, message):
    with pytest.raises(ValueError, match=message):
        Family(name, kind, "help", labels)


def test_a_sample_needs_one_value_per_label():
    family = Family("npu_lab_x", "gauge", "help", ("node", "card"))

    with pytest.raises(ValueError, match="label values"):
        family.add(("n1",), 1)
