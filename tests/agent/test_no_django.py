"""The agent runs on the node without the portal: nothing in nodeagent imports Django or the portal."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "nodeagent"
FORBIDDEN = ("django", "celery", "kubernetes", "channels", "redis", "labs.models", "labs.services", "labs.drivers", "portal")

# Run in a fresh interpreter: an import hook refuses Django, the portal's other dependencies
# and every part of the portal (of ``labs``, only the pure ``labs.domain`` is allowed), then
# every module of the agent is imported and its two commands asked for their usage.
BLOCKED_RUN = """
import importlib, pkgutil, runpy, sys

ALLOWED_FROM_LABS = ("labs", "labs.domain")
BLOCKED = {"django", "celery", "kubernetes", "channels", "redis", "portal", "accounts", "api", "lti", "webhooks"}


def refused(name):
    top = name.split(".")[0]
    if top == "labs":
        return name not in ALLOWED_FROM_LABS and not name.startswith("labs.domain.")
    return top in BLOCKED


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if refused(name):
            raise ImportError(f"the node agent imported {name}")
        return None


sys.meta_path.insert(0, Refuse())
import nodeagent

modules = ["nodeagent"] + [m.name for m in pkgutil.walk_packages(nodeagent.__path__, "nodeagent.")]
for name in modules:
    importlib.import_module(name)
for module, argv in (("nodeagent", ["--help"]), ("nodeagent", ["selftest", "--help"]), ("nodeagent.parsers", [])):
    sys.argv = [module, *argv]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        assert exc.code in (0, 2, None), (module, argv, exc.code)
loaded = sorted(name for name in sys.modules if refused(name))
assert not loaded, loaded
print(len(modules), "modules")
"""


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


def test_every_agent_module_and_command_runs_with_django_and_the_portal_blocked():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", BLOCKED_RUN], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-2]) >= 14  # every module was imported, not only the package
