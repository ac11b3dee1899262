"""Writes docs/settings.md from the settings table (portal/settings_table.py).

``python -m portal.settings_doc`` (``make settings-doc``) rewrites the page; ``--check`` only says
whether it is current (exit status 1 when it is not). No Django settings are needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from portal.settings_table import COMPUTED, SECTIONS, Setting

PAGE = Path(__file__).resolve().parent.parent / "docs" / "settings.md"

INTRO = """\
# Settings

<!-- Generated from portal/settings_table.py by `make settings-doc`: edit the table, not this page. -->

All from environment variables; every one also accepts `NAME_FILE` (a file holding the value: a
mounted secret). A malformed value stops start-up with `ImproperlyConfigured` naming the variable.
A boolean is one of `1/0`, `true/false`, `yes/no`, `on/off`.

The cluster driver's options are per backend, as in Django's `CACHES`: only the chosen driver's
variables are read, and an option the driver does not take stops start-up (see
[Kubernetes and deploy](kubernetes.md)).
"""

_KIND_NAMES = {
    "str": "string",
    "bool": "boolean",
    "int": "integer",
    "float": "number",
    "list": "comma-separated list",
    "json": "JSON object",
    "fernet": "Fernet keys",
    "database": "database URL",
    "redis": "Redis URL",
}


def type_text(setting: Setting) -> str:
    if setting.choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in setting.choices)
    text = _KIND_NAMES[setting.kind]
    low, high = setting.minimum, setting.maximum
    if setting.kind == "float" and low is None:
        low = 0.0  # portal.env.env_float's own floor
    if low is not None and high is not None:
        return f"{text}, {str(low)} to {str(high)}"
    if low is not None:
        return f"{text} ≥ {str(low)}"
    return text


def default_text(setting: Setting) -> str:
    if setting.default_doc is not None:
        return setting.default_doc
    value: Any = setting.default
    if value is COMPUTED or value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return "`" + ",".join(value) + "`"
    if isinstance(value, str):
        return f"`{value}`"
    return str(value)


def render() -> str:
    lines = [INTRO]
    for title, settings in SECTIONS.items():
        lines += [f"## {title}", "", "| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
        for setting in settings:
            help_text = setting.help.replace("|", "\\|")
            lines.append(f"| `{setting.name}` | {type_text(setting)} | {default_text(setting)} | {help_text} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/settings.md is not what the table gives")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(f"{PAGE} is out of date: run `make settings-doc`.", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
