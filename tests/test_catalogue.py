"""The Simplified Chinese catalogue: every string of the source is in it, translated, not fuzzy, with
its placeholders, and the compiled catalogue the portal reads is built from it."""

from __future__ import annotations

import gettext
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polib
import pytest

ROOT = Path(__file__).resolve().parents[1]
PO = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
MO = PO.with_suffix(".mo")
# Not copied for makemessages: version control, environments, run-time state, the catalogues.
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "var", "node_modules", "__pycache__", ".*_cache", ".hypothesis", "locale")
NAMED = re.compile(r"%\((\w+)\)")

Key = tuple[str | None, str]


def key(entry: polib.POEntry) -> Key:
    return entry.msgctxt, entry.msgid


def listed(keys) -> str:
    return "\n".join(f"  {msgid!r}" + (f" (context {context!r})" if context else "") for context, msgid in sorted(keys, key=str))


@pytest.fixture(scope="module")
def catalogue() -> polib.POFile:
    return polib.pofile(str(PO))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> set[Key]:
    """The strings `make messages` finds in the source now. It runs in a copy of the repository
    with no catalogue, so the catalogue in the repository is never written."""
    copy = tmp_path_factory.mktemp("catalogue") / "portal"
    shutil.copytree(ROOT, copy, ignore=NOT_SOURCE)
    (copy / "locale").mkdir()
    # This interpreter runs makemessages and the target's virtualenv is taken as built; none of the
    # variables of a `make test` this may run under reaches the copy.
    command = ["make", "--silent", "-C", str(copy), "messages", "VENV=.venv", f"PY={sys.executable}"]
    command.append("--assume-old=.venv/.installed-runtime")
    env = {name: value for name, value in os.environ.items() if name not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    extracted = polib.pofile(str(copy / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"))
    return {key(entry) for entry in extracted if not entry.obsolete}


def test_the_header_names_the_language_and_its_one_plural_form(catalogue):
    assert catalogue.metadata["Language"] == "zh_Hans"
    assert catalogue.metadata["Plural-Forms"] == "nplurals=1; plural=0;"
    assert catalogue.metadata["Content-Type"] == "text/plain; charset=UTF-8"
    assert catalogue.metadata["Last-Translator"] == "NPU Lab Portal"


def test_every_string_of_the_source_is_in_the_catalogue(catalogue, source):
    missing = source - {key(entry) for entry in catalogue if not entry.obsolete}
    todo = "run make messages, translate them, make compilemessages"
    assert not missing, f"not in {PO.relative_to(ROOT)}; {todo}:\n{listed(missing)}"


def test_no_string_in_use_is_marked_obsolete(catalogue, source):
    obsolete = {key(entry) for entry in catalogue.obsolete_entries()} & source
    assert not obsolete, f"used in the source but obsolete (#~) in the catalogue; run make messages:\n{listed(obsolete)}"


def test_the_catalogue_holds_no_string_the_source_no_longer_uses(catalogue, source):
    unused = {key(entry) for entry in catalogue} - source - {(None, "")}
    assert not unused, f"no longer in the source; run make messages to drop them:\n{listed(unused)}"


def test_every_message_is_translated_and_none_is_fuzzy(catalogue):
    untranslated = {key(entry) for entry in catalogue.untranslated_entries()}
    fuzzy = {key(entry) for entry in catalogue.fuzzy_entries()}
    assert not untranslated, f"untranslated in {PO.relative_to(ROOT)}:\n{listed(untranslated)}"
    assert not fuzzy, f"fuzzy in {PO.relative_to(ROOT)} (check the translation, then drop the flag):\n{listed(fuzzy)}"
    # Chinese has one plural form: msgstr[0] serves every count.
    several = {key(entry) for entry in catalogue if entry.msgid_plural and list(entry.msgstr_plural) != [0]}
    assert not several, f"more than msgstr[0]:\n{listed(several)}"


def placeholder_problem(msgid: str, msgstr: str) -> str | None:
    """Why ``msgstr`` cannot stand in for ``msgid`` when both are filled in with ``%``, or ``None``."""
    names = set(NAMED.findall(msgid))
    values = dict.fromkeys(names, 0)
    try:
        msgid % values
    except (TypeError, ValueError):
        # Never filled in: xgettext took the "%" of plain text for a directive ("AI Core (% of one card)").
        return None
    if set(NAMED.findall(msgstr)) != names:
        return f"placeholders {sorted(set(NAMED.findall(msgstr)))}, not {sorted(names)}"
    try:
        msgstr % values
    except (TypeError, ValueError) as exc:
        return f"cannot be filled in: {exc} (a literal % is written %%)"
    return None


def test_translations_keep_the_placeholders_of_their_message(catalogue):
    problems = []
    for entry in catalogue.translated_entries():
        if "python-format" not in entry.flags:
            continue
        if entry.msgid_plural:
            pairs = [(entry.msgid_plural, text) for text in entry.msgstr_plural.values()]
        else:
            pairs = [(entry.msgid, entry.msgstr)]
        problems += [f"  {msgid!r} → {msgstr!r}: {why}" for msgid, msgstr in pairs if (why := placeholder_problem(msgid, msgstr))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("msgid", "msgstr", "problem"),
    [
        ("%(used)s of %(limit)s", "已使用 %(used)s / %(limit)s", None),
        ("%(used)s of %(limit)s", "已使用 %(used)s", "placeholders"),
        ("%(used)s of %(limit)s", "已使用 %(used)s / %(limt)s", "placeholders"),
        ("%(core)s %% core", "%(core)s % 算力", "cannot be filled in"),
        ("AI Core (% of one card)", "AI Core 算力（单卡的 %）", None),
    ],
)
def test_a_translation_that_loses_or_breaks_a_placeholder_is_found(msgid, msgstr, problem):
    found = placeholder_problem(msgid, msgstr)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_the_compiled_catalogue_is_built_from_the_committed_one(catalogue):
    assert MO.exists(), f"{MO.relative_to(ROOT)} is missing: run make compilemessages"
    with MO.open("rb") as fh:
        compiled = gettext.GNUTranslations(fh)
    stale = []
    for entry in catalogue.translated_entries():
        # How the .mo stores a message with a context.
        msgid = f"{entry.msgctxt}\x04{entry.msgid}" if entry.msgctxt is not None else entry.msgid
        if entry.msgid_plural:
            ok = compiled.ngettext(msgid, entry.msgid_plural, 1) == entry.msgstr_plural[0]
        else:
            ok = compiled.gettext(msgid) == entry.msgstr
        if not ok:
            stale.append(key(entry))
    assert not stale, f"{MO.relative_to(ROOT)} is older than the catalogue: run make compilemessages\n{listed(stale)}"


def test_without_msgfmt_the_catalogue_compiles_to_the_same_translations(tmp_path):
    """A fresh machine has no GNU gettext: make compiles with polib (tools/compile_catalogue.py)."""
    made = tmp_path / "polib.mo"
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_catalogue.py"), str(PO), str(made)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    with made.open("rb") as fh, MO.open("rb") as reference:
        ours, msgfmts = gettext.GNUTranslations(fh), gettext.GNUTranslations(reference)
    header = ""  # the header's fields come in another order; the messages must not differ
    assert {k: v for k, v in ours._catalog.items() if k != header} == {k: v for k, v in msgfmts._catalog.items() if k != header}
    assert len(ours._catalog) > 900  # every message, not an empty file that happens to match an empty one


def test_the_catalogue_compiler_refuses_what_is_not_a_catalogue(tmp_path):
    broken = tmp_path / "django.po"
    broken.write_text("this is not a catalogue\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_catalogue.py"), str(broken), str(tmp_path / "django.mo")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "cannot read" in result.stderr
    assert not (tmp_path / "django.mo").exists()
    missing = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_catalogue.py"), str(tmp_path / "none.po"), str(tmp_path / "django.mo")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "is not a file" in missing.stderr
