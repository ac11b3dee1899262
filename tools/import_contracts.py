"""The contract import-linter 2.5 does not have: no import circles.

In ``[tool.importlinter]`` (pyproject.toml), ``type = "acyclic"`` with ``packages = [...]``: broken
when a module of those packages imports itself back through others, however long the way round
and wherever the imports are written (grimp reads those inside functions too). The layers
contracts say which way the arrows point between named layers; this one says there is no circle
anywhere, inside a layer included. ``tests/test_layers.py`` asks the same of the graph.
"""

from __future__ import annotations

import grimp
from importlinter import Contract, ContractCheck, fields, output


def import_circles(graph: grimp.ImportGraph, packages: list[str]) -> list[list[str]]:
    """Each group of two or more modules of ``packages`` that import one another, directly or
    round through others (a strongly connected component), its modules sorted; sorted."""
    modules = {module for package in packages for module in (package, *graph.find_descendants(package))}

    def imported_by(module: str) -> list[str]:
        return sorted(graph.find_modules_directly_imported_by(module) & modules)

    # Tarjan's algorithm, iterative: the import chains are deeper than Python's recursion limit allows for.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)

    for root in sorted(modules):
        if root in index:
            continue
        visit(root)
        work = [(root, iter(imported_by(root)))]
        while work:
            module, imports = work[-1]
            for other in imports:
                if other not in index:
                    visit(other)
                    work.append((other, iter(imported_by(other))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    importer = work[-1][0]
                    low[importer] = min(low[importer], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return sorted(circles)


def _lines(graph: grimp.ImportGraph, importer: str, imported: str) -> list[tuple[int, str]]:
    return [(d["line_number"], d["line_contents"]) for d in graph.get_import_details(importer=importer, imported=imported)]


class AcyclicContract(Contract):
    """No module of ``packages`` imports itself back through others.

    Configuration options:
        - packages: the root packages whose modules are checked (the imports between them count).
    """

    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        circles = import_circles(graph, list(self.packages))  # type: ignore[arg-type]
        edges = [
            [
                (importer, imported, _lines(graph, importer, imported))
                for importer in circle
                for imported in sorted(graph.find_modules_directly_imported_by(importer) & set(circle))
            ]
            for circle in circles
        ]
        return ContractCheck(kept=not circles, metadata={"edges": edges})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for circle in check.metadata["edges"]:
            modules = sorted({importer for importer, _, _ in circle})
            output.print_error(f"{len(modules)} modules import one another, round and back: {', '.join(modules)}")
            output.new_line()
            for importer, imported, lines in circle:
                where = "; ".join(f"l.{number} {contents}" for number, contents in lines)
                output.print(f"  {importer} -> {imported} ({where})")
            output.new_line()
