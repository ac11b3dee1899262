"""Scraping /metrics with the test client and reading the answer back with prometheus_client's parser."""

from __future__ import annotations

from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

TOKEN = "test-metrics-token"


def scrape() -> dict[str, list[Sample]]:
    """Every sample of ``GET /metrics``, by sample name (a counter's end in ``_total``)."""
    with override_settings(METRICS_TOKEN=TOKEN):
        response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def values(samples: dict[str, list[Sample]], name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """The samples of ``name`` as {(values of ``labels``...): value}."""
    return {tuple(s.labels[label] for label in labels): s.value for s in samples.get(name, [])}
