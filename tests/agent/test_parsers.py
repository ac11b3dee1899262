"""The vendor CLI parsers: every fixture, good or bad, gives a full result or a clear ParseError."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nodeagent.parsers.flexnpu_smi import FlexnpuInstance, parse_flexnpu_smi_info
from nodeagent.parsers.npu_smi import NpuChip, NpuProcess, chip_type, parse_npu_smi_info
from nodeagent.parsers.text import ParseError
from tests.agent.helpers import FIXTURES

A = "0b6f4c1e-5d1a-4f7e-9a53-2f4d8e1c7a10"
E = "9a1f3b62-4d7c-4a2e-8f91-6b5d3c0e7a58"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_flexnpu_smi_info_with_instances_on_several_cards_parses_every_row():
    instances = parse_flexnpu_smi_info(fixture("flexnpu_smi_info_several.txt"))

    assert len(instances) == 6
    assert instances[0] == FlexnpuInstance(
        npu_id=0, entity_id=A, flexnpu_id="1", core_percent=25, memory_limit_mib=8192, memory_used_mib=2048, aicore_percent=12
    )
    assert sorted({i.npu_id for i in instances}) == [0, 1, 2, 3]
    assert [(i.npu_id, i.flexnpu_id) for i in instances if i.entity_id == E] == [(2, "6"), (3, "7")]


def test_flexnpu_smi_info_without_pipes_and_in_another_column_order_parses_the_same():
    plain = parse_flexnpu_smi_info(fixture("flexnpu_smi_info_plain.txt"))
    piped = parse_flexnpu_smi_info(fixture("flexnpu_smi_info_several.txt"))

    assert plain == piped[:4]


def test_flexnpu_smi_info_with_no_instances_is_an_empty_list():
    assert parse_flexnpu_smi_info(fixture("flexnpu_smi_info_no_instances.txt")) == []


def test_a_no_instances_message_row_is_an_empty_list():
    text = (FIXTURES / "flexnpu_smi_info_no_instances.txt").read_text()
    rule = text.splitlines()[-1]
    text += "| No FlexNPU instance found" + " " * (len(rule) - 27) + "|\n" + rule + "\n"

    assert parse_flexnpu_smi_info(text) == []


@pytest.mark.parametrize(
    "name, line, reason",
    [
        ("flexnpu_smi_info_empty.txt", 1, "empty output"),
        ("flexnpu_smi_info_truncated.txt", 9, "output stops in the middle of a line (truncated?)"),
        ("flexnpu_smi_info_truncated_row.txt", 9, "row has 4 column(s), the header has 7 (truncated?)"),
        ("flexnpu_smi_info_garbled.bin", 1, "output is not UTF-8 text (binary junk?)"),
        ("flexnpu_smi_info_error_text.txt", 1, "no header row naming an Entity-ID column in 1 line(s)"),
        (
            "flexnpu_smi_info_wrong_columns.txt",
            2,
            "header lacks column(s) FlexNPU-ID, AICore(%), Memory-Limit(MB), Memory-Usage(MB), AICore-Util(%)",
        ),
    ],
)
def test_bad_flexnpu_smi_info_output_raises_a_parse_error_saying_where_and_why(name, line, reason):
    with pytest.raises(ParseError) as caught:
        parse_flexnpu_smi_info(fixture(name))

    assert (caught.value.line, caught.value.reason) == (line, reason)
    assert str(caught.value) == f"line {line}: {reason}"


def several_lines() -> list[str]:
    return (FIXTURES / "flexnpu_smi_info_several.txt").read_text().splitlines()


def with_line(number: int, text: str) -> str:
    lines = several_lines()
    lines[number - 1] = text
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text, reason",
    [
        (with_line(6, several_lines()[5].replace("| 25 ", "| 2x ")), "AICore(%): expected a whole number, got '2x'"),
        (with_line(6, several_lines()[5].replace(A, " " * len(A))), "Entity-ID: expected an identifier, got ''"),
        (with_line(6, several_lines()[5].replace("| 12 ", "| 140")), "AICore-Util(%): 140 is outside 0..100"),
        (with_line(7, several_lines()[6].replace("| 2 ", "| 1 ")), "FlexNPU-ID 1 is already listed on line 6"),
        (with_line(6, several_lines()[5].rstrip("|")), "row does not end with '|' (truncated?)"),
        (with_line(6, "0 " + A + " 1 25 2048 8192 12"), f"expected a table row starting with '|', got '0 {A} 1 25 2048 8192 12'"),
        (with_line(6, several_lines()[5].replace("2048", "\x1b[1m")), "control character '\\x1b' in the output (binary junk?)"),
    ],
)
def test_a_bad_flexnpu_smi_info_row_is_refused_with_its_line(text, reason):
    with pytest.raises(ParseError) as caught:
        parse_flexnpu_smi_info(text)

    assert caught.value.reason == reason
    assert caught.value.line in (6, 7)


def test_a_flexnpu_smi_table_that_is_not_closed_is_refused():
    text = "\n".join(several_lines()[:-1]) + "\n"

    with pytest.raises(ParseError, match=r"line 11: the table is not closed by a rule line \(truncated\?\)"):
        parse_flexnpu_smi_info(text)


def test_a_flexnpu_smi_table_whose_closing_rule_is_cut_is_refused():
    text = "\n".join([*several_lines()[:-1], several_lines()[-1][:20]]) + "\n"

    with pytest.raises(ParseError) as caught:
        parse_flexnpu_smi_info(text)

    width = len(several_lines()[1].strip())
    assert caught.value.reason == f"the output ends with a rule line cut short: 20 of {width} characters (truncated?)"


def test_npu_smi_info_of_an_8_card_910b_server_parses_every_chip_and_process():
    info = parse_npu_smi_info(fixture("npu_smi_info_910b.txt"))

    assert info.version == "24.1.rc3"
    assert [c.npu_id for c in info.chips] == list(range(8))
    assert info.chips[1] == NpuChip(
        npu_id=1,
        chip_id=0,
        device_id=None,
        name="910B3",
        bus_id="0000:C2:00.0",
        health="OK",
        aicore_percent=87,
        memory_used_mib=36211,
        memory_total_mib=65536,
        memory_kind="HBM",
        power_milliwatts=251700,
        temperature_celsius=37,
    )
    assert [c.npu_id for c in info.chips if not c.healthy] == [5]
    assert info.processes == [
        NpuProcess(npu_id=1, chip_id=0, pid=2317810, name="python3.11", memory_mib=32768, container_pid=None),
        NpuProcess(npu_id=3, chip_id=0, pid=2318044, name="vllm", memory_mib=8640, container_pid=None),
    ]


def test_npu_smi_info_without_a_process_table_is_complete_when_it_ends_with_its_rule():
    info = parse_npu_smi_info(fixture("npu_smi_info_no_process_table.txt"))

    assert len(info.chips) == 8
    assert info.processes == []


def test_npu_smi_info_parses_the_layout_seen_on_310p_cards_too():
    text = """+-------------------+-----------------+------------------------------------------------------+
| NPU     Name      | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device    | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===================+=================+======================================================+
| 0       310P3     | OK              | 15.8         42                0    / 0              |
| 0       0         | 0000:82:00.0    | 0            1074 / 21534                            |
+===================+=================+======================================================+
+-------------------+-----------------+------------------------------------------------------+
| NPU     Chip      | Process id      | Process name             | Process memory(MB)        |
+===================+=================+======================================================+
| No running processes found in NPU 0                                                      |
+===================+=================+======================================================+
"""
    info = parse_npu_smi_info(text)

    assert info.chips == [NpuChip(0, 0, 0, "310P3", "0000:82:00.0", "OK", 0, 1074, 21534, "DDR", 15800, 42)]
    assert info.processes == []


# The 116-column layout of 26.0 drivers, as in the pastes of vllm-ascend issues #12980 and
# #16983 (which the search tools only returned in pieces, so this one is built in that layout
# from the 910B rows above): a wider third cell and a 5-column process table.
WIDE = """+------------------------------------------------------------------------------------------------------------------+
| npu-smi 26.0.rc2                            Version: 26.0.rc2                                                    |
+---------------------------+---------------+----------------------------------------------------------------------+
| NPU   Name                | Health        | Power(W)             Temp(C)                 Hugepages-Usage(page)   |
| Chip  Phy-ID              | Bus-Id        | AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)           |
+===========================+===============+======================================================================+
| 0     Ascend910           | OK            | 162.6                34                      0    / 0                |
| 0     0                   | 0000:9D:00.0  | 0                    0    / 0                3419 / 65536            |
+------------------------------------------------------------------------------------------------------------------+
| 0     Ascend910           | OK            | -                    34                      0    / 0                |
| 1     1                   | 0000:9F:00.0  | 0                    0    / 0                31877/ 65536            |
+===========================+===============+======================================================================+
+---------------------------+---------------+----------------------------------------------------------------------+
| NPU     Chip              | Process id    | Process name       | Process memory(MB)    | Process id in container |
+===========================+===============+======================================================================+
| 0       0                 | 632268        | python3.1          | 197                   | NA                      |
+===========================+===============+======================================================================+
| 0       1                 | 692318        |                    | 12417                 | 4321                    |
+===========================+===============+======================================================================+
"""


def test_the_wide_26_layout_with_its_container_pid_column_parses():
    info = parse_npu_smi_info(WIDE)

    assert info.version == "26.0.rc2"
    assert [(c.npu_id, c.chip_id, c.device_id, c.memory_used_mib) for c in info.chips] == [(0, 0, 0, 3419), (0, 1, 1, 31877)]
    assert info.processes == [
        NpuProcess(npu_id=0, chip_id=0, pid=632268, name="python3.1", memory_mib=197, container_pid="NA"),
        NpuProcess(npu_id=0, chip_id=1, pid=692318, name="", memory_mib=12417, container_pid="4321"),
    ]


@pytest.mark.parametrize(
    "name, line, reason",
    [
        ("npu_smi_info_empty.txt", 1, "empty output"),
        ("npu_smi_info_truncated.txt", 19, "output stops in the middle of a line (truncated?)"),
        # Cut inside the rule under NPU 0 (a newline added by whatever stored it): not a one-card node.
        ("npu_smi_info_last_rule_cut.txt", 9, "the output ends with a rule line cut short: 15 of 98 characters (truncated?)"),
        ("npu_smi_info_garbled.bin", 1, "output is not UTF-8 text (binary junk?)"),
        ("npu_smi_info_wrong_columns.txt", 1, "no npu-smi header row ('| NPU Name | Health | ...') in 9 line(s)"),
        ("npu_smi_info_command_not_found.txt", 1, "no npu-smi header row ('| NPU Name | Health | ...') in 1 line(s)"),
    ],
)
def test_bad_npu_smi_info_output_raises_a_parse_error_saying_where_and_why(name, line, reason):
    with pytest.raises(ParseError) as caught:
        parse_npu_smi_info(fixture(name))

    assert (caught.value.line, caught.value.reason) == (line, reason)


def npu_lines() -> list[str]:
    return (FIXTURES / "npu_smi_info_910b.txt").read_text().splitlines()


@pytest.mark.parametrize(
    "edit, line, reason",
    [
        (lambda lines: lines[:-1], 48, "the output does not end with a rule line (truncated?)"),
        (lambda lines: lines[:36], 36, "the output does not end with a rule line (truncated?)"),
        (lambda lines: lines[:35] + [lines[35][:40]], 36, "row does not end with '|' (truncated?)"),
        (lambda lines: lines[:35] + ["| 1       0    | 2317810       | python3.11        |"], 36, "process row has 3"),
        (lambda lines: lines[:29], 29, "the output does not end with a rule line (truncated?)"),
        (lambda lines: lines[:28], 28, "NPU row on line 28 has no chip row (truncated?)"),
        (lambda lines: lines[:8] + [lines[8][:30]], 9, "the output ends with a rule line cut short: 30 of 98"),
        (lambda lines: lines[:48] + [lines[48][:97]], 49, "the output ends with a rule line cut short: 97 of 98"),
        (lambda lines: lines[:8] + [lines[8][:30]] + lines[9:], 9, "rule line is 30 characters wide, the table 98"),
        (lambda lines: lines[:33], 33, "the process table has no rows"),
    ],
)
def test_npu_smi_info_cut_anywhere_is_refused_at_the_line_where_it_stops(edit, line, reason):
    with pytest.raises(ParseError) as caught:
        parse_npu_smi_info("\n".join(edit(npu_lines())) + "\n")

    assert caught.value.line == line
    assert caught.value.reason.startswith(reason)


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda lines: lines[:6] + ["| 0     910B3     | OK   |"] + lines[7:], "row has 2 cell(s), the header has 3"),
        (lambda lines: lines[:7] + lines[8:], "NPU row on line 7 has no chip row"),
        (lambda lines: [line.replace("3379 / 65536", "") for line in lines], "cell 3 has 2 value(s) for 3 column(s)"),
        (lambda lines: [line.replace("3379 / 65536", "3379   ") for line in lines], "memory usage: expected 'used / total'"),
        (lambda lines: [line.replace("3379 / 65536", "70000/65536 ") for line in lines], "memory usage: 70000 MB used of"),
        (lambda lines: lines[:9] + lines[6:9] + lines[9:], "NPU 0 chip 0 is already listed on line 7"),
        (lambda lines: [line.replace("| OK   ", "| ??   ", 1) for line in lines], "Health: expected a word such as OK, got '??'"),
        (lambda lines: [line.replace("AICore(%) ", "AICore    ") for line in lines], "header lacks column(s) AICore(%)"),
        (lambda lines: lines[:3] + lines[4:], "no npu-smi header row"),
        (lambda lines: [line.replace("| 2317810 ", "| 23x7810 ") for line in lines], "Process id: expected a whole number"),
        (lambda lines: [line.replace("| NPU     Chip      ", "| NPU               ") for line in lines], "process table header"),
    ],
)
def test_a_bad_npu_smi_info_row_is_refused(edit, reason):
    with pytest.raises(ParseError) as caught:
        parse_npu_smi_info("\n".join(edit(npu_lines())) + "\n")

    assert caught.value.reason.startswith(reason)


@pytest.mark.parametrize(
    "name, memory_total_mib, expected",
    [
        ("910B3", 65536, "Ascend910B3"),
        ("910B4", 32768, "Ascend910B4"),
        ("910B4-1", 65536, "Ascend910B4-1"),
        ("910B2C", 65536, "Ascend910B2C"),
        ("910B", 32768, "Ascend910"),
        ("910B", 65536, "Ascend910B"),
        ("910ProB", 32768, "Ascend910"),
        ("910A", 32768, "Ascend910"),
        ("Ascend910", 65536, "Ascend910C"),
        ("310P3", 21534, "Ascend310P3"),
        ("310B4", 15609, "Ascend310B4"),
    ],
)
def test_the_chip_type_tells_a_first_generation_910_from_the_910b_series(name, memory_total_mib, expected):
    assert chip_type(name, memory_total_mib) == expected


def run_parser_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodeagent.parsers", *args], capture_output=True, text=True, timeout=30)


def test_the_operator_check_prints_what_it_parsed():
    result = run_parser_cli("flexnpu-smi", str(FIXTURES / "flexnpu_smi_info_several.txt"))

    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 6
    assert f'"entity_id": "{A}"' in result.stdout.splitlines()[0]
    assert "parsed 6 instance(s)" in result.stderr


def test_the_operator_check_prints_the_exact_parse_error():
    result = run_parser_cli("npu-smi", str(FIXTURES / "npu_smi_info_truncated.txt"))

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "npu-smi info: parse error: line 19: output stops in the middle of a line (truncated?)\n"


def test_the_operator_check_explains_its_usage():
    result = run_parser_cli("nvidia-smi", "out.txt")

    assert result.returncode == 2
    assert "usage: python -m nodeagent.parsers flexnpu-smi|npu-smi FILE" in result.stderr


def test_the_operator_check_prints_chips_processes_and_chip_types():
    result = run_parser_cli("npu-smi", str(FIXTURES / "npu_smi_info_910b.txt"))

    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 10
    assert '"chip_type": "Ascend910B3"' in result.stdout.splitlines()[0]
    assert result.stderr == "npu-smi info: parsed 8 NPU(s), 8 chip(s), 2 process(es) (npu-smi 24.1.rc3, driver 24.1.rc3)\n"
