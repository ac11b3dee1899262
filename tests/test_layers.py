"""No module imports itself back through others: the suite fails on a new import circle, as
``make lint`` does (the "acyclic" contract in pyproject.toml), function-level imports included."""

from __future__ import annotations

import grimp

from tools.import_contracts import import_circles

PACKAGES = ["labs", "lti", "api", "webhooks", "accounts", "portal", "nodeagent"]


def test_no_module_imports_itself_back_through_others():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)

    assert import_circles(graph, PACKAGES) == []


def test_a_circle_is_found_however_long_the_way_round():
    graph = grimp.ImportGraph()
    for module in ("app", "app.models", "app.selectors", "app.services", "app.views"):
        graph.add_module(module)
    graph.add_import(importer="app.views", imported="app.services")
    graph.add_import(importer="app.services", imported="app.selectors")
    graph.add_import(importer="app.selectors", imported="app.models")
    assert import_circles(graph, ["app"]) == []

    graph.add_import(importer="app.models", imported="app.services")

    assert import_circles(graph, ["app"]) == [["app.models", "app.selectors", "app.services"]]
