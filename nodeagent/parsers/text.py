"""What every vendor CLI parser shares: ``ParseError``, reading the output into lines, and
the rule lines, cells and numbers of the tables ``npu-smi`` and ``flexnpu-smi`` print."""

from __future__ import annotations

import re


class ParseError(ValueError):
    """The output is not what the parser expects; ``line`` is 1-based."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")


def output_lines(output: str | bytes) -> list[str]:
    if isinstance(output, bytes):
        try:
            output = output.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(output[: exc.start].count(b"\n") + 1, "output is not UTF-8 text (binary junk?)") from None
    if not output.strip():
        raise ParseError(1, "empty output")
    lines = [line.removesuffix("\r") for line in output.split("\n")]
    for number, line in enumerate(lines, start=1):
        bad = next((ch for ch in line if not ch.isprintable() and ch != "\t"), None)
        if bad is not None:
            raise ParseError(number, f"control character {bad!r} in the output (binary junk?)")
    if not output.endswith("\n"):
        raise ParseError(len(lines), "output stops in the middle of a line (truncated?)")
    return lines[:-1]


def is_rule(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 2 and stripped[0] == "+" and set(stripped) <= set("+-=|")


def check_rule_width(lines: list[str], number: int, width: int) -> None:
    """A rule line spans the table, as wide as its header row; a shorter one was cut.

    The last line of an output cut inside its closing rule (and given a newline by whatever
    stored it) still looks like a rule: without this, the table above it would read as a
    whole node with fewer cards.
    """
    rule = lines[number - 1].strip()
    if len(rule) == width:
        return
    if not any(line.strip() for line in lines[number:]):
        raise ParseError(number, f"the output ends with a rule line cut short: {len(rule)} of {width} characters (truncated?)")
    raise ParseError(number, f"rule line is {len(rule)} characters wide, the table {width} (cut short?)")


def split_cells(line: str, number: int, piped: bool) -> list[str]:
    stripped = line.strip()
    if not piped:
        return stripped.split()
    if len(stripped) < 2 or not stripped.endswith("|"):
        raise ParseError(number, "row does not end with '|' (truncated?)")
    return [cell.strip() for cell in stripped[1:-1].split("|")]


def normalize(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def whole_number(number: int, label: str, value: str) -> int:
    if not WHOLE_NUMBER.fullmatch(value):
        raise ParseError(number, f"{label}: expected a whole number, got {clip(value)!r}")
    return int(value)


def clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
