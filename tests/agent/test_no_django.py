"""The agent runs on the node without the portal: nothing in nodeagent imports Django or the portal."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "nodeagent"
FORBIDDEN = ("django", "celery", "kubernetes", "channels", "redis", "labs.models", "labs.services", "labs.drivers", "portal")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_agent_modules_import_nothing_from_django_or_the_portal():
    files = sorted(AGENT.rglob("*.py"))
    assert len(files) >= 6
    for path in files:
        bad = {m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_the_whole_agent_loads_no_django():
    code = (
        "import sys, nodeagent.__main__, nodeagent.client, nodeagent.server, nodeagent.parsers\n"
        "import nodeagent.cards.base, nodeagent.cards.flexnpu_smi, nodeagent.cards.simulated\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'kubernetes', 'portal'))\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
