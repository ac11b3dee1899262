"""Card health from npu-smi: temperature, power and HBM per card, the node's versions, in the
agent's inventory and metrics; a value that is not a number is refused, never read as 0."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.cards.simulated import SimulatedDriver
from nodeagent.client import AgentClient, AgentUnavailable
from nodeagent.parsers.npu_smi import parse_npu_smi_board, parse_npu_smi_info
from nodeagent.parsers.text import ParseError
from nodeagent.wire import InventoryReport, VersionsReport
from tests.agent.helpers import FIXTURES, NODE, TOKEN, call, fake_cli, running
from tests.agent.test_client import canned_client
from tests.agent.test_parsers import run_parser_cli


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def replace_cell(text: str, row_start: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new`` (padded to its width) on the first line starting with ``row_start``."""
    lines = text.splitlines(keepends=True)
    at = next(n for n, line in enumerate(lines) if line.startswith(row_start))
    lines[at] = lines[at].replace(old, new.ljust(len(old)), 1)
    return "".join(lines)


def test_each_chip_has_its_temperature_power_and_hbm_use():
    info = parse_npu_smi_info(fixture("npu_smi_info_910b.txt"))

    readings = [(c.npu_id, c.temperature_celsius, c.power_milliwatts, c.memory_used_mib, c.memory_total_mib) for c in info.chips]
    assert readings[:2] == [(0, 36, 93400, 3379, 65536), (1, 37, 251700, 36211, 65536)]
    assert readings[6] == (6, 38, None, 3379, 65536)  # Power(W) "NA": not reported, not 0 W


def test_the_banner_gives_the_npu_smi_and_driver_versions():
    info = parse_npu_smi_info(fixture("real/vllm_ascend_3542_910b4-1_25.0.rc1.1_excerpt.txt"))

    assert (info.npu_smi_version, info.version) == ("25.0.rc1.1", "25.0.rc1.1")


@pytest.mark.parametrize(
    "name, power_milliwatts",
    [
        ("real/nputop_a3_25.2.0.txt", [162800, None, 167100]),  # the second die prints "-"
        ("real/nputop_310b4_23.0.0.txt", [0]),  # "0.0" is a reading of 0 W
        ("real/nvtop_421_310p3_duo_25.2.0_excerpt.txt", [None, None]),
        ("real/mindxsdk_styletransfer_310_21.0.3.1.txt", [12800]),
    ],
)
def test_real_outputs_give_the_power_as_printed_and_none_where_it_is_not(name, power_milliwatts):
    chips = parse_npu_smi_info(fixture(name)).chips

    assert [c.power_milliwatts for c in chips[: len(power_milliwatts)]] == power_milliwatts
    assert all(c.temperature_celsius is not None and 20 <= c.temperature_celsius <= 70 for c in chips)


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("93.4 ", "93,4", "line 7: Power(W): expected watts such as 93.4, or NA, got '93,4'"),
        ("93.4 ", "-93.4", "line 7: Power(W): expected watts such as 93.4, or NA, got '-93.4'"),
        ("93.4 ", "W", "line 7: Power(W): expected watts such as 93.4, or NA, got 'W'"),
        ("36 ", "3x", "line 7: Temp(C): expected whole degrees such as 36, or NA, got '3x'"),
        ("36 ", "36.5", "line 7: Temp(C): expected whole degrees such as 36, or NA, got '36.5'"),
    ],
)
def test_a_malformed_power_or_temperature_is_refused_with_its_line(old, new, message):
    text = replace_cell(fixture("npu_smi_info_910b.txt"), "| 0     910B3", old, new)

    with pytest.raises(ParseError) as caught:
        parse_npu_smi_info(text)
    assert str(caught.value) == message


def test_a_banner_whose_version_is_not_one_is_refused():
    text = fixture("npu_smi_info_910b.txt").replace("Version: 24.1.rc3 ", "Version: 24.1;rm ", 1)

    with pytest.raises(ParseError, match=r"banner: driver version '24.1;rm' is not a version"):
        parse_npu_smi_info(text)


def test_the_board_output_gives_the_firmware_version():
    assert parse_npu_smi_board(fixture("npu_smi_info_board_910b.txt")) == "7.5.0.1.129"


@pytest.mark.parametrize(
    "text, message",
    [
        ("        Firmware Version : NA\n", "line 1: Firmware Version: expected a version such as 7.1.0.5.220, got 'NA'"),
        ("        Firmware Version : 7.1;x\n", "line 1: Firmware Version: expected a version such as 7.1.0.5.220, got '7.1;x'"),
        ("        Software Version : 24.1.rc3\n", "line 1: no 'Firmware Version : ...' line in 1 line(s)"),
        (
            "dcmi module initialize failed. ret is -8005\n",
            "line 1: npu-smi printed an error instead of the board: 'dcmi module initialize failed. ret is -8005'",
        ),
    ],
)
def test_a_board_output_without_a_firmware_version_is_refused(text, message):
    with pytest.raises(ParseError) as caught:
        parse_npu_smi_board(text)
    assert str(caught.value) == message


def test_the_npu_smi_driver_reports_each_cards_health_and_the_nodes_versions(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", board="npu_smi_info_board_910b.txt")
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path), npu_smi_cache_seconds=0)

    cards = driver.inventory()

    assert [(c.index, c.temperature_celsius, c.power_milliwatts) for c in cards[:2]] == [(0, 36, 93400), (1, 37, 251700)]
    assert cards[6].power_milliwatts is None
    assert driver.versions() == VersionsReport(driver="24.1.rc3", firmware="7.5.0.1.129", npu_smi="24.1.rc3")
    driver.versions()
    assert [argv for argv in npu.calls() if argv[:3] == ["info", "-t", "board"]] == [["info", "-t", "board", "-i", "0"]]


def test_a_board_that_cannot_be_read_leaves_the_firmware_unknown_not_the_inventory(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", board="npu_smi_info_board_910b.txt", board_exit_code=3)
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path), npu_smi_cache_seconds=0)

    assert driver.versions() == VersionsReport(driver="24.1.rc3", firmware="", npu_smi="24.1.rc3")
    assert len(driver.inventory()) == 8


def test_the_simulated_cards_warm_up_and_draw_more_power_when_busy():
    driver = SimulatedDriver(node_name=NODE)
    idle = driver.inventory()[0]
    driver.register("busy", card_index=0, core_percent=50, memory_mib=8192)
    driver.set_demand("busy", 100, memory_used_mib=6144)

    busy = driver.inventory()[0]

    assert 30 <= idle.temperature_celsius < busy.temperature_celsius <= 70
    assert 80_000 <= idle.power_milliwatts < busy.power_milliwatts <= 320_000
    assert busy.memory_used_mib == 6144
    assert driver.versions().driver == "25.2.0"


def test_the_agents_inventory_carries_card_health_and_versions_to_the_portals_client(agent, simulated):
    report = AgentClient(agent.url, TOKEN).inventory_report()

    assert isinstance(report, InventoryReport)
    assert report.versions == VersionsReport(driver="25.2.0", firmware="7.7.0.6.236", npu_smi="25.2.0")
    expected = simulated.inventory()
    assert [(c.temperature_celsius, c.power_milliwatts) for c in report.cards] == [
        (c.temperature_celsius, c.power_milliwatts) for c in expected
    ]
    assert call(agent, "GET", "/v1/inventory").json()["cards"][0]["power_milliwatts"] == expected[0].power_milliwatts


def test_the_agents_metrics_export_temperature_power_and_versions(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", board="npu_smi_info_board_910b.txt")
    flexnpu = fake_cli(tmp_path / "bin", "flexnpu-smi", "flexnpu_smi_info_no_instances.txt")
    driver = FlexnpuSmiDriver(binary=str(flexnpu.path), npu_smi=str(npu.path))
    with running(driver) as server:
        response = call(server, "GET", "/metrics")

    samples = {
        (s.name, s.labels.get("card")): s for f in text_string_to_metric_families(response.body.decode()) for s in f.samples
    }
    assert samples[("npu_card_temperature_celsius", "1")].value == 37
    assert samples[("npu_card_power_watts", "1")].value == pytest.approx(251.7)
    assert ("npu_card_power_watts", "6") not in samples  # NA: no sample rather than 0 W
    assert samples[("npu_card_memory_used_bytes", "1")].value == 36211 * 1024 * 1024
    info = samples[("npu_node_info", None)]
    assert info.labels == {
        "node": NODE,
        "driver_version": "24.1.rc3",
        "firmware_version": "7.5.0.1.129",
        "npu_smi_version": "24.1.rc3",
    }


OLD_CARD = {
    "index": 0,
    "die_id": "",
    "chip_type": "Ascend910B3",
    "memory_total_mib": 65536,
    "memory_used_mib": 3379,
    "aicore_percent": 0,
    "healthy": True,
}


def test_an_agent_that_predates_card_health_reports_none_and_no_versions():
    server, client = canned_client(200, json.dumps({"cards": [OLD_CARD]}).encode())
    try:
        report = client.inventory_report()
    finally:
        server.shutdown()
        server.server_close()

    assert (report.cards[0].temperature_celsius, report.cards[0].power_milliwatts) == (None, None)
    assert report.versions == VersionsReport("", "", "")


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"cards": [{**OLD_CARD, "temperature_celsius": "hot"}]}, "CardReport.temperature_celsius is 'hot'"),
        ({"cards": [{**OLD_CARD, "power_milliwatts": 93.4}]}, "CardReport.power_milliwatts is 93.4"),
        ({"cards": [{**OLD_CARD, "temperature_celsius": -5}]}, r"CardReport.temperature_celsius is -5, outside 0..300"),
        ({"cards": [{**OLD_CARD, "power_milliwatts": 10**12}]}, r"CardReport.power_milliwatts is 1000000000000, outside"),
        ({"cards": [OLD_CARD], "versions": {"driver": "25.2.0"}}, "VersionsReport.firmware is None"),
    ],
)
def test_a_card_health_reading_of_the_wrong_type_is_refused(payload, message):
    server, client = canned_client(200, json.dumps(payload).encode())
    try:
        with pytest.raises(AgentUnavailable, match=message):
            client.inventory_report()
    finally:
        server.shutdown()
        server.server_close()


def test_the_operator_check_prints_the_firmware_version_it_read():
    result = run_parser_cli("npu-smi-board", str(FIXTURES / "npu_smi_info_board_910b.txt"))

    assert (result.returncode, result.stdout) == (0, '{"firmware_version": "7.5.0.1.129"}\n')
