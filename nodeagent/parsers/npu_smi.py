"""The parsers of ``npu-smi info``, ``npu-smi info -t board`` and ``npu-smi info -t device-share``.

``npu-smi info`` — checked against real outputs pasted in public issues and documents (see
``tests/agent/fixtures/real/`` and docs/node-agent.md "Hardware checked"): a version banner, two header
lines (``NPU Name | Health | Power(W) Temp(C) [Hugepages-Usage(page)]`` and ``Chip [Phy-ID|Device] |
Bus-Id | AICore(%) Memory-Usage(MB) [HBM-Usage(MB)]``), two lines per chip, then, when the driver
prints one, the process table (``NPU Chip | Process id | Process name | Process memory(MB) [|
Process id in container]``, rows or ``No running processes found in NPU n``).

- one row pair per *chip*: an NPU (a card, ``-i``) may hold two (Atlas A3 / 910C, Atlas 300I Duo
  / 310P3), each with its own ``Chip`` number, memory and Phy-ID/Device. A chip is what a
  FlexNPU/vNPU instance lands on, so chips, not NPUs, are the unit returned;
- the process table is optional: the 310B prints none (checked), nor, as reported, do 20.x/21.x
  drivers (not checked: no real output of theirs was found). Output is complete
  when it ends with a rule line (``+----+``) as wide as the table; a paste cut anywhere (in the
  chip table, the process table, or inside the closing rule line itself) does not, and is
  refused with the line where it stops. A cut falling exactly at the end of a rule line between
  two NPU blocks cannot be told from a smaller node (npu-smi prints no count), and a process
  table header with no row after it is refused;
- processes are returned (an empty name is allowed: real rows have it), but an empty table
  never means an idle card: a workload in another container uses HBM and lists no process.
  Use the chip's memory in use;
- the memory is HBM-Usage when the chip has HBM (910 family), else Memory-Usage (310P/310B DDR);
- ``Power(W)`` (one decimal, returned in milliwatts) and ``Temp(C)`` (whole degrees) are the
  chip's own; ``NA`` or ``-`` (an A3's second die prints ``-``: the NPU's power is on its first)
  is ``None``, "not reported", never 0; anything else that is not a number is refused;
- the banner ``npu-smi <its version>  Version: <driver version>`` gives both versions (``""``
  each when the banner is absent); the firmware is not in ``npu-smi info``: see
  ``parse_npu_smi_board`` (``npu-smi info -t board -i <NPU>``);
- ``AICore(%)`` is returned as printed; in vNPU mode the driver forces it to 0, so it says
  nothing about how compute is shared and nothing here uses it for shares;
- ``chip_type()`` names the chip for the ledger: a first-generation Ascend 910 (printed as
  ``910A``, ``910ProB``, or ``910B`` with 32 GB HBM) is ``Ascend910``; the 910B series keeps its
  name (``Ascend910B3``); an A3 die (printed ``Ascend910``, 64 GB) is ``Ascend910C``;
- an error printed instead of the table (``dcmi model initialized failed ... ret is -8020``) is
  refused with that line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeagent.parsers.text import (
    IDENTIFIER,
    WHOLE_NUMBER,
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
class NpuChip:
    """One chip of ``npu-smi info``: ``npu_id`` is the card (``npu-smi -i``), ``chip_id`` the chip on
    it (``-c``), ``device_id`` its Phy-ID / Device number when the header has that column."""

    npu_id: int
    chip_id: int
    device_id: int | None
    name: str
    bus_id: str
    health: str
    aicore_percent: int
    memory_used_mib: int
    memory_total_mib: int
    memory_kind: str
    power_milliwatts: int | None = None
    temperature_celsius: int | None = None

    @property
    def healthy(self) -> bool:
        return self.health == "OK"


@dataclass(frozen=True)
class NpuProcess:
    """One row of the process table; ``name`` may be empty, ``container_pid`` is ``None`` when the
    driver prints no such column (and ``"NA"`` as printed for a process outside any container)."""

    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mib: int
    container_pid: str | None


@dataclass(frozen=True)
class NpuSmiInfo:
    """What ``npu-smi info`` printed: the driver version of the banner (``version``) and
    ``npu-smi``'s own (``npu_smi_version``); ``""`` each when the banner is absent."""

    version: str
    chips: list[NpuChip]
    processes: list[NpuProcess]
    npu_smi_version: str = ""


USED_OF_TOTAL = re.compile(r"([0-9]{1,9})\s*/\s*([0-9]{1,9})")
NO_PROCESSES = re.compile(r"No running processes found in NPU [0-9]{1,9}")
ZERO_OF_ZERO = re.compile(r"0\s*/\s*0")
VERSION_BANNER = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}")
# Power(W) as npu-smi prints it (one decimal, at most three kept); Temp(C) whole degrees, and a
# card below 0 °C is not running. "NA" and "-" are "not reported".
WATTS = re.compile(r"([0-9]{1,5})(?:\.([0-9]{1,3}))?")
DEGREES = re.compile(r"[0-9]{1,3}")
NOT_REPORTED = {"NA", "-"}
FIRMWARE_LINE = re.compile(r"\s*Firmware Version\s*:\s*(\S*)\s*")
KEY_VALUE_LINE = re.compile(r"\s*([A-Za-z][A-Za-z -]*?)\s*:\s*(\S*)\s*")
# What npu-smi prints instead of its table when DCMI fails ("... failed ... ret is -8020"):
# the line with the return code says most, any "failed" line is the fallback.
VENDOR_ERRORS = (re.compile(r"\bret is -[0-9]+"), re.compile(r"\bfailed\b", re.IGNORECASE))
DEVICE_COLUMNS = ("Phy-ID", "Device")
FIRST_GENERATION_910 = {"910A", "910ProA", "910ProB", "910PremiumA"}
FIRST_GENERATION_910_HBM_MIB = 32768


def parse_npu_smi_info(output: str | bytes) -> NpuSmiInfo:
    """Every chip and process ``npu-smi info`` lists, in output order (see the module docstring)."""
    lines = output_lines(output)
    first_at = next((n for n, line in enumerate(lines) if _piped_tokens(line)[:1] == [["NPU", "Name"]]), None)
    if first_at is None:
        error_at = next((n for pattern in VENDOR_ERRORS for n, line in enumerate(lines) if pattern.search(line)), None)
        if error_at is not None:
            error = clip(lines[error_at].strip(), 120)
            raise ParseError(error_at + 1, f"npu-smi printed an error instead of the table: {error!r}")
        raise ParseError(1, f"no npu-smi header row ('| NPU Name | Health | ...') in {len(lines)} line(s)")
    second_at = _next_content(lines, first_at + 1)
    if second_at is None:
        raise ParseError(len(lines), "output ends after the first header row (truncated?)")
    first = _npu_header(first_at + 1, _piped_tokens(lines[first_at]), required=("NPU", "Name", "Health"))
    second = _npu_header(second_at + 1, _piped_tokens(lines[second_at]), required=("Chip", "Bus-Id", "AICore(%)"))
    if "HBM-Usage(MB)" not in _flat(second) and "Memory-Usage(MB)" not in _flat(second):
        raise ParseError(second_at + 1, "header names neither HBM-Usage(MB) nor Memory-Usage(MB)")
    banner = next((m for line in lines[:first_at] if (m := VERSION_BANNER.search(line))), None)
    npu_smi_version, version = ("", "") if banner is None else (banner[1], banner[2])
    for label, value in (("npu-smi version", npu_smi_version), ("driver version", version)):
        if value and not VERSION.fullmatch(value):
            raise ParseError(first_at, f"banner: {label} {clip(value)!r} is not a version")

    chips: list[NpuChip] = []
    processes: list[NpuProcess] = []
    seen: dict[tuple[int, int], int] = {}
    seen_devices: dict[int, int] = {}
    pending: tuple[int, dict[str, str]] | None = None
    process_columns: int | None = None
    process_rows = 0
    width = len(lines[first_at].strip())
    for number, line in enumerate(lines[second_at + 1 :], start=second_at + 2):
        if not line.strip():
            continue
        if is_rule(line):
            check_rule_width(lines, number, width)
            if pending is not None:
                raise ParseError(number, f"NPU row on line {pending[0]} has no chip row")
            continue
        if not line.lstrip().startswith("|"):
            raise ParseError(number, f"expected a table row starting with '|', got {clip(line)!r}")
        if process_columns is not None:
            process = _npu_process(number, split_cells(line, number, piped=True), process_columns)
            process_rows += 1
            if process is not None:
                processes.append(process)
            continue
        cells = split_cells(line, number, piped=True)
        if any("process id" in cell.lower() for cell in cells):
            if pending is not None:
                raise ParseError(number, f"NPU row on line {pending[0]} has no chip row")
            if normalize(cells[0]) != "npuchip" or len(cells) not in (4, 5):
                got = clip(line.strip())
                raise ParseError(number, f"process table header: expected 'NPU Chip | Process id | ...', got {got!r}")
            process_columns = len(cells)
            continue
        if pending is None:
            pending = (number, _npu_values(number, first, line))
            continue
        chip = _npu_chip(pending[0], number, {**pending[1], **_npu_values(number, second, line)})
        key = (chip.npu_id, chip.chip_id)
        if key in seen:
            raise ParseError(pending[0], f"NPU {chip.npu_id} chip {chip.chip_id} is already listed on line {seen[key]}")
        if chip.device_id is not None and chip.device_id in seen_devices:
            raise ParseError(number, f"device {chip.device_id} is already listed on line {seen_devices[chip.device_id]}")
        seen[key] = pending[0]
        if chip.device_id is not None:
            seen_devices[chip.device_id] = number
        chips.append(chip)
        pending = None
    if pending is not None:
        raise ParseError(pending[0], f"NPU row on line {pending[0]} has no chip row (truncated?)")
    if not chips:
        raise ParseError(len(lines), "the NPU table has no rows")
    last_at = max(n for n, line in enumerate(lines) if line.strip())
    if not is_rule(lines[last_at]):
        raise ParseError(last_at + 1, "the output does not end with a rule line (truncated?)")
    if process_columns is not None and not process_rows:
        raise ParseError(last_at + 1, "the process table has no rows, not even 'No running processes found' (truncated?)")
    return NpuSmiInfo(version=version, chips=chips, processes=processes, npu_smi_version=npu_smi_version)


def parse_npu_smi_board(output: str | bytes) -> str:
    """The firmware version ``npu-smi info -t board -i <NPU>`` prints (``Firmware Version : 7.1.0.5.220``).

    FORMAT FROM THE VENDOR'S npu-smi REFERENCE (``key : value`` lines), NOT FROM A CAPTURED
    OUTPUT. Raises ``ParseError`` when no such line is there or its value is not a version
    (``NA`` included: a board that cannot tell says nothing about its firmware).
    """
    lines = output_lines(output)
    for number, line in enumerate(lines, start=1):
        match = FIRMWARE_LINE.fullmatch(line)
        if match is None:
            continue
        if not VERSION.fullmatch(match[1]) or match[1] == "NA":
            raise ParseError(number, f"Firmware Version: expected a version such as 7.1.0.5.220, got {clip(match[1])!r}")
        return match[1]
    error_at = next((n for pattern in VENDOR_ERRORS for n, line in enumerate(lines) if pattern.search(line)), None)
    if error_at is not None:
        raise ParseError(error_at + 1, f"npu-smi printed an error instead of the board: {clip(lines[error_at].strip(), 120)!r}")
    raise ParseError(1, f"no 'Firmware Version : ...' line in {len(lines)} line(s)")


def parse_npu_smi_device_share(output: str | bytes) -> dict[int, bool]:
    """Each NPU's device-share mode as ``npu-smi info -t device-share`` prints it: ``True`` when every
    chip of it says ``Device-share Status : True``.

    The layout is the one npu-smi's source prints (``"\\t%-30s : %s\\n"``, ``False``/``True``) and a
    public verification log shows, one block per NPU::

        NPU ID                         : 4
        Chip Count                     : 1

        Device-share Status            : True
        Chip ID                        : 0

    Raises ``ParseError`` for no block, an NPU block without a status (cut short), a status that
    is neither ``True`` nor ``False``, an NPU listed twice, or an error printed instead.
    """
    lines = output_lines(output)
    shares: dict[int, bool] = {}
    current: int | None = None
    started_at: dict[int, int] = {}
    for number, line in enumerate(lines, start=1):
        match = KEY_VALUE_LINE.fullmatch(line)
        if match is None:
            continue
        key, value = match[1], match[2]
        if key == "NPU ID":
            if not WHOLE_NUMBER.fullmatch(value):
                raise ParseError(number, f"NPU ID: expected a number, got {clip(value)!r}")
            if current is not None and current not in shares:
                raise ParseError(number, f"NPU {current} (line {started_at[current]}) has no Device-share Status")
            current = int(value)
            if current in started_at:
                raise ParseError(number, f"NPU {current} is already listed on line {started_at[current]}")
            started_at[current] = number
        elif key == "Device-share Status":
            if current is None:
                raise ParseError(number, "Device-share Status before any NPU ID")
            if value not in ("True", "False"):
                raise ParseError(number, f"Device-share Status: expected True or False, got {clip(value)!r}")
            shares[current] = shares.get(current, True) and value == "True"
    if current is None:
        error_at = next((n for pattern in VENDOR_ERRORS for n, line in enumerate(lines) if pattern.search(line)), None)
        if error_at is not None:
            error = clip(lines[error_at].strip(), 120)
            raise ParseError(error_at + 1, f"npu-smi printed an error instead of the device-share mode: {error!r}")
        raise ParseError(1, f"no 'NPU ID : ...' line in {len(lines)} line(s)")
    if current not in shares:
        raise ParseError(len(lines), f"NPU {current} (line {started_at[current]}) has no Device-share Status (truncated?)")
    return shares


def chip_type(name: str, memory_total_mib: int) -> str:
    """The ledger's name for a chip ``npu-smi info`` calls ``name``, told apart by its memory.

    A first-generation Ascend 910 prints ``910A``, ``910ProA``, ``910ProB``, ``910PremiumA`` or
    (some boards) ``910B`` with 32 GB of HBM: all are ``Ascend910``. A 910B-series chip prints its
    model (``910B3``, ``910B4-1``, ``910B2C``) and keeps it. An Atlas A3 (910C) die prints
    ``Ascend910`` with 64 GB: ``Ascend910C``. Anything else is ``Ascend`` + its name.
    """
    model = name.removeprefix("Ascend")
    if model in FIRST_GENERATION_910 or (model == "910B" and memory_total_mib <= FIRST_GENERATION_910_HBM_MIB):
        return "Ascend910"
    if model == "910":
        return "Ascend910C" if memory_total_mib > FIRST_GENERATION_910_HBM_MIB else "Ascend910"
    return f"Ascend{model}"


def _piped_tokens(line: str) -> list[list[str]]:
    """The whitespace-separated tokens of each ``|`` cell ("0  / 0" is one token); [] for non-rows."""
    stripped = line.strip()
    if not stripped.startswith("|") or not stripped.endswith("|") or len(stripped) < 2:
        return []
    return [re.findall(r"\S+\s*/\s*\S+|\S+", cell) for cell in stripped[1:-1].split("|")]


def _flat(header: list[list[str]]) -> list[str]:
    return [name for cell in header for name in cell]


def _npu_header(number: int, header: list[list[str]], required: tuple[str, ...]) -> list[list[str]]:
    missing = [name for name in required if name not in _flat(header)]
    if missing:
        raise ParseError(number, f"header lacks column(s) {', '.join(missing)}")
    return header


def _npu_values(number: int, header: list[list[str]], line: str) -> dict[str, str]:
    row = _piped_tokens(line)
    if not row:
        raise ParseError(number, "row does not end with '|' (truncated?)")
    if len(row) != len(header):
        raise ParseError(number, f"row has {len(row)} cell(s), the header has {len(header)} (truncated?)")
    values = {}
    for index, (names, tokens) in enumerate(zip(header, row, strict=True), start=1):
        if len(names) != len(tokens):
            raise ParseError(number, f"cell {index} has {len(tokens)} value(s) for {len(names)} column(s) {' '.join(names)}")
        values.update(zip(names, tokens, strict=True))
    return values


def _npu_chip(npu_line: int, number: int, values: dict[str, str]) -> NpuChip:
    hbm = values.get("HBM-Usage(MB)")
    if hbm is not None and not ZERO_OF_ZERO.fullmatch(hbm):
        memory, kind = hbm, "HBM"
    else:
        memory, kind = values.get("Memory-Usage(MB)", hbm), "DDR"
    if memory is None:
        raise ParseError(number, "no memory usage column")
    match = USED_OF_TOTAL.fullmatch(memory)
    if not match:
        raise ParseError(number, f"memory usage: expected 'used / total', got {clip(memory)!r}")
    used, total = int(match[1]), int(match[2])
    if used > total:
        raise ParseError(number, f"memory usage: {used} MB used of {total} MB")
    health = values["Health"]
    if not re.fullmatch(r"[A-Za-z]+", health):
        raise ParseError(npu_line, f"Health: expected a word such as OK, got {clip(health)!r}")
    aicore = whole_number(number, "AICore(%)", values["AICore(%)"])
    if aicore > 100:
        raise ParseError(number, f"AICore(%): {aicore} is outside 0..100")
    bus_id = values["Bus-Id"]
    if not IDENTIFIER.fullmatch(bus_id):
        raise ParseError(number, f"Bus-Id: expected a PCI address, got {clip(bus_id)!r}")
    name = values["Name"]
    if not IDENTIFIER.fullmatch(name):
        raise ParseError(npu_line, f"Name: expected a chip name such as 910B3, got {clip(name)!r}")
    device = next((values[label] for label in DEVICE_COLUMNS if label in values), None)
    power = values.get("Power(W)")
    temperature = values.get("Temp(C)")
    return NpuChip(
        npu_id=whole_number(npu_line, "NPU", values["NPU"]),
        chip_id=whole_number(number, "Chip", values["Chip"]),
        device_id=None if device is None else whole_number(number, "Phy-ID/Device", device),
        name=name,
        bus_id=bus_id,
        health=health,
        aicore_percent=aicore,
        memory_used_mib=used,
        memory_total_mib=total,
        memory_kind=kind,
        power_milliwatts=None if power is None else _milliwatts(npu_line, power),
        temperature_celsius=None if temperature is None else _degrees(npu_line, temperature),
    )


def _milliwatts(number: int, value: str) -> int | None:
    if value in NOT_REPORTED:
        return None
    match = WATTS.fullmatch(value)
    if match is None:
        raise ParseError(number, f"Power(W): expected watts such as 93.4, or NA, got {clip(value)!r}")
    return int(match[1]) * 1000 + int((match[2] or "0").ljust(3, "0"))


def _degrees(number: int, value: str) -> int | None:
    if value in NOT_REPORTED:
        return None
    if not DEGREES.fullmatch(value):
        raise ParseError(number, f"Temp(C): expected whole degrees such as 36, or NA, got {clip(value)!r}")
    return int(value)


def _npu_process(number: int, cells: list[str], columns: int) -> NpuProcess | None:
    """A process row, or ``None`` for a ``No running processes found in NPU n`` row."""
    if len(cells) == 1 and NO_PROCESSES.fullmatch(cells[0]):
        return None
    if len(cells) != columns:
        raise ParseError(number, f"process row has {len(cells)} cell(s), the header has {columns} (truncated?)")
    where = cells[0].split()
    if len(where) != 2:
        raise ParseError(number, f"process row: expected 'NPU Chip' numbers, got {clip(cells[0])!r}")
    container_pid = cells[4] if columns == 5 else None
    if container_pid is not None and not re.fullmatch(r"[0-9]{1,9}|NA", container_pid):
        raise ParseError(number, f"Process id in container: expected a number or NA, got {clip(container_pid)!r}")
    return NpuProcess(
        npu_id=whole_number(number, "NPU", where[0]),
        chip_id=whole_number(number, "Chip", where[1]),
        pid=whole_number(number, "Process id", cells[1]),
        name=cells[2],
        memory_mib=whole_number(number, "Process memory(MB)", cells[3]),
        container_pid=container_pid,
    )


def _next_content(lines: list[str], start: int) -> int | None:
    return next((n for n in range(start, len(lines)) if lines[n].strip() and not is_rule(lines[n])), None)
