"""deploy/grafana/npu-lab-portal.json: an importable Grafana dashboard whose every query names metrics the portal exports.

The exported names come from a real scrape of ``/metrics`` (the test client, after making data
so that every family has samples), read back with prometheus_client's parser; the dashboard's
names from every panel's ``expr`` and every variable's query, with PromQL's functions,
keywords, label matchers, ranges and grouping lists taken out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labs.models import RepairEvent
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch
from tests.metrics.helpers import scrape

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "npu-lab-portal.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
# PromQL words that are neither metrics nor followed by "(" where they appear in an expression.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
# What the issue asks the dashboard to show, by the metric that shows it.
SUBJECTS = {
    "card heatmap of reserved AI Core": "npu_lab_card_core_reserved_ratio",
    "memory reserved": "npu_lab_card_memory_reserved_bytes",
    "sessions by state": "npu_lab_sessions",
    "queue length": "npu_lab_course_sessions",
    "oldest wait": "npu_lab_queue_oldest_age_seconds",
    "wait quantiles": "npu_lab_queue_wait_seconds",
    "admissions/s": "npu_lab_admissions_per_second",
    "guarantee breaches": "npu_lab_guarantee_breaches",
    "repairs by kind": "npu_lab_repair_events_total",
    "nodes available": "npu_lab_nodes",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        if expr[match.end() :].lstrip().startswith("(") or match.group() in KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        names.add(match.group())
    return names


def all_panels(panels: list[dict]) -> list[dict]:
    return [p for panel in panels for p in [panel, *all_panels(panel.get("panels", []))]]


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def series_selector(variable_query: str) -> str:
    """The series a Grafana variable query reads: ``label_values(<selector>, <label>)`` gives the selector."""
    match = re.fullmatch(r"label_values\((.+),\s*\w+\s*\)", variable_query.strip())
    assert match, f"not a label_values() query: {variable_query!r}"
    return match.group(1)


def queries(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in all_panels(dashboard["panels"]) for t in p.get("targets", [])]
    variables = [series_selector(v["query"]["query"]) for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs + variables


@pytest.fixture
def exported(world) -> set[str]:
    """Every sample name of a scrape in which every family has samples."""
    for student, template in zip(world["students"], ["small", "small", "medium", "medium"], strict=True):
        session_launch(student=student, course=world["course"], template=world[template])
    allocation_pass()
    RepairEvent.objects.create(kind=RepairEvent.Kind.GUARANTEE_BREACH, node=world["node"], message="test")
    samples = scrape()
    empty = {"npu_lab_queue_wait_seconds", "npu_lab_guarantee_breaches"} - set(samples)
    assert not empty, f"families without samples: {empty}"
    return set(samples)


def test_every_query_names_only_metrics_the_portal_exports(dashboard, exported):
    unknown = {}
    for query in queries(dashboard):
        names = metric_names(query)
        assert names, f"no metric in {query!r}"
        missing = {n for n in names if n not in exported and re.sub(r"_(bucket|sum|count)$", "", n) not in exported}
        if missing:
            unknown[query] = missing
    assert not unknown, f"metrics the portal does not export: {unknown}"


def test_it_shows_what_the_issue_asks_for(dashboard):
    used = set().union(*(metric_names(q) for q in queries(dashboard)))

    assert {subject: name for subject, name in SUBJECTS.items() if name not in used} == {}


def test_it_imports_with_a_prometheus_datasource_chosen_at_import(dashboard):
    assert [(i["name"], i["type"], i["pluginId"]) for i in dashboard["__inputs"]] == [
        ("DS_PROMETHEUS", "datasource", "prometheus")
    ]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["id"] is None and dashboard["uid"]
    for panel in all_panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"] == DATASOURCE


def test_panels_have_unique_ids_and_fit_the_grid(dashboard):
    panels = all_panels(dashboard["panels"])
    ids = [p["id"] for p in panels]

    assert len(ids) == len(set(ids))
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        assert all(t["refId"] for t in panel.get("targets", []))


def test_a_heatmap_shows_the_cards(dashboard):
    kinds = {p["type"] for p in all_panels(dashboard["panels"]) if "npu_lab_card_core_reserved_ratio" in json.dumps(p)}

    assert {"heatmap", "table"} <= kinds


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('max by (node, card) (npu_lab_card_core_reserved_ratio{node=~"$node"})', {"npu_lab_card_core_reserved_ratio"}),
        ("max by (kind) (increase(npu_lab_repair_events_total[1h])) > 0", {"npu_lab_repair_events_total"}),
        ("count(max by (node, card) (npu_lab_card_healthy) == 0) or vector(0)", {"npu_lab_card_healthy"}),
        ("sum(a) * on (node, card) group_left () max by (node) (b offset 5m) / 1e-9", {"a", "b"}),
        ("histogram_quantile(0.9, sum by (le) (rate(x_bucket[$__rate_interval])))", {"x_bucket"}),
        (series_selector('label_values(npu_lab_course_sessions{state="queued"}, course)'), {"npu_lab_course_sessions"}),
    ],
)
def test_metric_names_are_read_out_of_promql(expr, names):
    assert metric_names(expr) == names
