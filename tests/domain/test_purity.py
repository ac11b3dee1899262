"""labs/domain is pure Python: it must not import Django, Celery or kubernetes."""

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "labs" / "domain"
FORBIDDEN = ("django", "celery", "kubernetes", "channels", "redis", "labs.models", "labs.services")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_domain_modules_import_nothing_from_frameworks():
    files = sorted(DOMAIN.rglob("*.py"))
    assert files, "labs/domain has no modules"
    for path in files:
        bad = {m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)}
        assert not bad, f"{path.relative_to(DOMAIN)} imports {sorted(bad)}"
