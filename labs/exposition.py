"""Prometheus text exposition (format 0.0.4), written directly for the portal's ``/metrics``.

prometheus_client's ``generate_latest`` builds a sample tuple and a label dict per sample and
formats each one on its own: for the 48,000 card samples of a 1,000-node cluster (six per card)
that was several times slower than writing the lines here with each card's label string made
once (``bench.metrics_scale``; docs/framework-overrides.md). The output is byte for byte what
``generate_latest`` writes for the same families (``tests/metrics/test_exposition.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.utils import floatToGoString

# The classic text format, which every Prometheus reads (metric and label names are plain ASCII here).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass
class Family:
    """One metric family: its full sample name (a counter's ends in ``_total``), type, help and label names.

    ``add`` takes the label values in the order of ``labels``; a value is a number (an int is
    written as a float, as Prometheus reads every value).
    """

    name: str
    type: Literal["gauge", "counter"]
    help: str
    labels: Sequence[str] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"{self.name!r} is not a Prometheus metric name")
        if self.type not in ("gauge", "counter"):
            raise ValueError(f"{self.name}: type {self.type!r} is not gauge or counter")
        if self.type == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"{self.name}: a counter's name ends in _total")
        bad = [label for label in self.labels if not _LABEL.fullmatch(label) or label.startswith("__")]
        if bad:
            raise ValueError(f"{self.name}: {bad} are not label names")
        self.labels = tuple(self.labels)

    def add(self, values: Sequence[str], value: float) -> None:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name}: {len(values)} label values for labels {self.labels}")
        self.samples.append((tuple(values), value))


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def render(families: Iterable[Family]) -> bytes:
    """The families in the Prometheus text format, in the order given, UTF-8.

    Label pairs are written sorted by label name, as ``generate_latest`` writes them; the label
    string of a set of values is made once and reused by every family with the same labels.
    """
    lines: list[str] = []
    label_strings: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}
    # Most values repeat (0, 1, 16, a card's memory): each is formatted once. Keyed by the value's
    # repr, since 0 == 0.0 == False as dict keys and NaN is not equal to itself.
    numbers: dict[str, str] = {}
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}\n# TYPE {family.name} {family.type}\n")
        names = family.labels
        for values, value in family.samples:
            key = repr(value)
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = floatToGoString(value)
            if not names:
                lines.append(f"{family.name} {number}\n")
                continue
            text = label_strings.get((names, values))
            if text is None:
                pairs = sorted(zip(names, values, strict=True))
                text = label_strings[names, values] = "{" + ",".join(f'{name}="{_escape_value(v)}"' for name, v in pairs) + "}"
            lines.append(f"{family.name}{text} {number}\n")
    return "".join(lines).encode()
