"""Chinese text takes Chinese punctuation: a full-width colon or comma (：，；？！) between
Chinese words, never the ASCII one, in the catalogue's translations and where a page joins a
translated label to its value (``{% translate ": " context "between a label and its value" %}``
renders ": " in English and "：" in Chinese)."""

from __future__ import annotations

import re
from pathlib import Path

import polib

ROOT = Path(__file__).resolve().parents[1]
PO = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
CJK = r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]"
# An ASCII mark after a Chinese character (or a placeholder) and before one, a space between or not.
ASCII_BETWEEN_CHINESE = re.compile(rf"(?:(?<={CJK})|(?<=\)s)|(?<=\)d))[:,;?!] ?(?={CJK})|(?<={CJK})[:,;?!] ?(?=%\()")
# A translated label glued to a literal ": " (or "; ", ", " before more text), which stays ASCII in every language.
TRANSLATED = r"""\{% *(translate|trans) +("[^"]*"|'[^']*')[^%]*%\}|\{% *endblocktranslate *%\}"""
LITERAL_COLON_AFTER_TRANSLATION = re.compile(rf"({TRANSLATED})[:;,]")


def ascii_marks(text: str) -> list[str]:
    return [text[max(0, m.start() - 8) : m.end() + 8] for m in ASCII_BETWEEN_CHINESE.finditer(text)]


def test_the_rule_sees_an_ascii_colon_or_comma_between_chinese_words():
    for text in ("原因: 超时", "原因:超时", "已停止,请重试", "共 %(n)s 次: 失败"):
        assert ascii_marks(text), text
    assert not ascii_marks("原因：超时") and not ascii_marks("以 https:// 开头") and not ascii_marks("registry/name:tag，名称")


def test_no_chinese_translation_has_an_ascii_colon_or_comma_between_chinese_words():
    problems = []
    for entry in polib.pofile(str(PO)):
        texts = list(entry.msgstr_plural.values()) if entry.msgid_plural else [entry.msgstr]
        problems += [f"  {entry.msgid!r}: …{found}…" for text in texts for found in ascii_marks(text)]
    assert not problems, "use ：，；？！ in Chinese text:\n" + "\n".join(problems)


def test_no_template_glues_an_ascii_colon_to_a_translated_label():
    problems = []
    for path in sorted(ROOT.glob("**/templates/**/*.html")):
        name = str(path.relative_to(ROOT))
        if ".venv" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            problems += [f"  {name}:{number}: {m.group(0)}" for m in LITERAL_COLON_AFTER_TRANSLATION.finditer(line)]
    assert not problems, 'write {% translate ": " context "between a label and its value" %}:\n' + "\n".join(problems)
