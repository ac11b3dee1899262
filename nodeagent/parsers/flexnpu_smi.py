"""The parser of ``flexnpu-smi info``.

``flexnpu-smi info`` — FORMAT BUILT FROM THE VENDOR DOCUMENTATION, NOT FROM A CAPTURED OUTPUT.
The CCE FlexNPU user guide documents ``flexnpu-smi info`` (it lists every FlexNPU instance on the
node with its entity-id, the pod UID) and ``flexnpu-smi unregister -u <flexnpu ID>``, but shows
the output only as a screenshot, and no captured output has been published anywhere we could
find. The layout below uses the guide's terms and npu-smi's table style; check it on a real node
before trusting the flexnpu-smi driver::

    flexnpu-smi info > out.txt
    python -m nodeagent.parsers flexnpu-smi out.txt

which prints what it parsed, or the exact parse error (the line and why). Expected layout, one
row per FlexNPU instance::

    +-----+--------------------------------------+------------+-----------+------------------+------------------+----------------+
    | NPU | Entity-ID                            | FlexNPU-ID | AICore(%) | Memory-Usage(MB) | Memory-Limit(MB) | AICore-Util(%) |
    +=====+======================================+============+===========+==================+==================+================+
    | 0   | 0b6f4c1e-5d1a-4f7e-9a53-2f4d8e1c7a10 | 3          | 25        | 2048             | 8192             | 12             |
    +-----+--------------------------------------+------------+-----------+------------------+------------------+----------------+

- the header row names the columns; their order may vary, other columns are ignored, names are
  compared without case and punctuation (``Entity-ID`` = ``EntityID``); ``MB`` is read as MiB,
  as npu-smi's ``65536`` MB for a 64 GiB card is;
- ``NPU`` is the physical card; ``Entity-ID`` the pod UID; ``FlexNPU-ID`` what ``unregister -u``
  takes (both are kept); ``AICore(%)`` the floor; ``Memory-Limit(MB)`` the memory cap;
  ``Memory-Usage(MB)`` and ``AICore-Util(%)`` what the instance uses now;
- ``+---+`` rule lines and ``|`` separators are optional: without ``|`` the columns are split on
  whitespace. A ``|``-table must end with a rule line, and its rule lines are as wide as its
  header row (a shorter one was cut); lines before the header (a banner) are
  skipped; a single cell ``No ... found`` stands for no instances; an instance on several cards
  (``flexnpu-num`` > 1) has one row per card, with the same Entity-ID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeagent.parsers.text import (
    IDENTIFIER,
    ParseError,
    check_rule_width,
    clip,
    is_rule,
    normalize,
    output_lines,
    split_cells,
    whole_number,
)


@dataclass(frozen=True)
class FlexnpuInstance:
    """One row of ``flexnpu-smi info``: a FlexNPU instance on one card."""

    npu_id: int
    entity_id: str
    flexnpu_id: str
    core_percent: int
    memory_limit_mib: int
    memory_used_mib: int
    aicore_percent: int


# Normalized header name -> FlexnpuInstance field.
FLEXNPU_COLUMNS = {
    "npu": "npu_id",
    "entityid": "entity_id",
    "flexnpuid": "flexnpu_id",
    "aicore": "core_percent",
    "memorylimitmb": "memory_limit_mib",
    "memorylimitmib": "memory_limit_mib",
    "memoryusagemb": "memory_used_mib",
    "memoryusagemib": "memory_used_mib",
    "aicoreutil": "aicore_percent",
}
FLEXNPU_LABELS = {
    "npu_id": "NPU",
    "entity_id": "Entity-ID",
    "flexnpu_id": "FlexNPU-ID",
    "core_percent": "AICore(%)",
    "memory_limit_mib": "Memory-Limit(MB)",
    "memory_used_mib": "Memory-Usage(MB)",
    "aicore_percent": "AICore-Util(%)",
}
NO_INSTANCES = re.compile(r"no\b.*\bfound\.?", re.IGNORECASE)


def parse_flexnpu_smi_info(output: str | bytes) -> list[FlexnpuInstance]:
    """Every FlexNPU instance ``flexnpu-smi info`` lists, in output order (see the module docstring)."""
    lines = output_lines(output)
    header_at = next((n for n, line in enumerate(lines) if "entityid" in _normalized_cells(line)), None)
    if header_at is None:
        raise ParseError(1, f"no header row naming an Entity-ID column in {len(lines)} line(s)")
    piped = lines[header_at].lstrip().startswith("|")
    fields = _flexnpu_header(header_at + 1, split_cells(lines[header_at], header_at + 1, piped))

    instances: list[FlexnpuInstance] = []
    seen: dict[str, int] = {}
    no_instances_row = None
    width = len(lines[header_at].strip())
    for number, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        if not line.strip():
            continue
        if is_rule(line):
            if piped:
                check_rule_width(lines, number, width)
            continue
        if NO_INSTANCES.fullmatch(line.strip().strip("|").strip()):
            no_instances_row = number
            continue
        if piped and not line.lstrip().startswith("|"):
            raise ParseError(number, f"expected a table row starting with '|', got {clip(line)!r}")
        cells = split_cells(line, number, piped)
        if len(cells) != len(fields):
            raise ParseError(number, f"row has {len(cells)} column(s), the header has {len(fields)} (truncated?)")
        instance = _flexnpu_row(number, fields, cells)
        for key, what in ((instance.flexnpu_id, "FlexNPU-ID"), (f"{instance.entity_id} on NPU {instance.npu_id}", "Entity-ID")):
            if key in seen:
                raise ParseError(number, f"{what} {key} is already listed on line {seen[key]}")
            seen[key] = number
        instances.append(instance)
    if piped and not is_rule(_last_nonblank(lines)):
        raise ParseError(len(lines), "the table is not closed by a rule line (truncated?)")
    if no_instances_row is not None and instances:
        raise ParseError(no_instances_row, "a 'No ... found' row beside instance rows")
    return instances


def _normalized_cells(line: str) -> list[str]:
    stripped = line.strip()
    if is_rule(stripped):
        return []
    return [normalize(cell) for cell in re.split(r"\||\s+", stripped) if cell.strip()]


def _flexnpu_header(number: int, cells: list[str]) -> list[str | None]:
    fields = [FLEXNPU_COLUMNS.get(normalize(cell)) for cell in cells]
    named = [f for f in fields if f is not None]
    duplicated = sorted({FLEXNPU_LABELS[f] for f in named if named.count(f) > 1})
    if duplicated:
        raise ParseError(number, f"header names {', '.join(duplicated)} twice")
    missing = [label for field, label in FLEXNPU_LABELS.items() if field not in named]
    if missing:
        raise ParseError(number, f"header lacks column(s) {', '.join(missing)}")
    return fields


def _flexnpu_row(number: int, fields: list[str | None], cells: list[str]) -> FlexnpuInstance:
    values: dict[str, str | int] = {}
    for field, cell in zip(fields, cells, strict=True):
        if field is None:
            continue
        label = FLEXNPU_LABELS[field]
        if field in ("entity_id", "flexnpu_id"):
            if not IDENTIFIER.fullmatch(cell):
                raise ParseError(number, f"{label}: expected an identifier, got {clip(cell)!r}")
            values[field] = cell
        else:
            values[field] = whole_number(number, label, cell)
    if not 0 <= int(values["aicore_percent"]) <= 100:
        raise ParseError(number, f"AICore-Util(%): {values['aicore_percent']} is outside 0..100")
    return FlexnpuInstance(**values)  # type: ignore[arg-type]


def _last_nonblank(lines: list[str]) -> str:
    return next((line for line in reversed(lines) if line.strip()), "")
