"""Compile a gettext catalogue (.po) into the .mo file Django reads, where GNU msgfmt is missing.

    python tools/compile_catalogue.py locale/zh_Hans/LC_MESSAGES/django.po locale/zh_Hans/LC_MESSAGES/django.mo

``make`` uses msgfmt (whose --check also checks the placeholders) when the machine has it, else
this, so ``make demo`` needs nothing installed by hand. polib writes what msgfmt does: the
translated entries, not the fuzzy or obsolete ones. The catalogue tests (tests/test_catalogue.py)
check placeholders either way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polib


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: compile_catalogue.py SOURCE.po TARGET.mo", file=sys.stderr)
        return 2
    source, target = (Path(arg) for arg in argv)
    if not source.is_file():  # polib would take the path for the catalogue's text
        print(f"compile_catalogue: {source} is not a file", file=sys.stderr)
        return 1
    try:
        catalogue = polib.pofile(str(source))
    except (OSError, ValueError) as exc:
        print(f"compile_catalogue: cannot read {source}: {exc}", file=sys.stderr)
        return 1
    partial = target.with_name(target.name + ".partial")
    catalogue.save_as_mofile(str(partial))
    partial.replace(target)  # never a half-written catalogue where Django looks
    print(f"{target}: {len(catalogue.translated_entries())} messages (polib; msgfmt is not installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
