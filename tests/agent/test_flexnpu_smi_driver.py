"""The flexnpu-smi driver, run against fake vendor CLIs written to tmp_path (real subprocesses)."""

from __future__ import annotations

import time

import pytest

from nodeagent.cards.base import DriverError, NotSupported
from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.wire import CardReport, InstanceReport
from tests.agent.helpers import fake_cli

A = "0b6f4c1e-5d1a-4f7e-9a53-2f4d8e1c7a10"
E = "9a1f3b62-4d7c-4a2e-8f91-6b5d3c0e7a58"
UNKNOWN = "11111111-2222-3333-4444-555555555555"


def driver_for(tmp_path, flexnpu_output="flexnpu_smi_info_several.txt", npu_output="npu_smi_info_910b.txt", **options):
    flexnpu = fake_cli(tmp_path / "bin", "flexnpu-smi", flexnpu_output, **options)
    npu = fake_cli(tmp_path / "bin", "npu-smi", npu_output)
    return FlexnpuSmiDriver(binary=str(flexnpu.path), npu_smi=str(npu.path), timeout_seconds=10), flexnpu, npu


def test_instances_are_read_from_flexnpu_smi_info(tmp_path):
    driver, flexnpu, _ = driver_for(tmp_path)

    instances = driver.instances()

    assert instances[0] == InstanceReport(
        entity_id=A,
        flexnpu_id="1",
        card_index=0,
        core_percent=25,
        memory_mib=8192,
        memory_used_mib=2048,
        aicore_percent=12,
        demand_percent=None,
    )
    assert len(instances) == 6
    assert flexnpu.calls() == [["info"]]


def test_inventory_is_read_from_npu_smi_info(tmp_path):
    driver, _, npu = driver_for(tmp_path)

    cards = driver.inventory()

    assert len(cards) == 8
    assert cards[1] == CardReport(
        index=1,
        die_id="",
        chip_type="Ascend910B3",
        memory_total_mib=65536,
        memory_used_mib=36211,
        aicore_percent=87,
        healthy=True,
        power_milliwatts=251700,
        temperature_celsius=37,
    )
    assert [c.index for c in cards if not c.healthy] == [5]
    assert npu.calls() == [["info"]]


def test_unregister_removes_a_listed_instance_by_its_flexnpu_id(tmp_path):
    driver, flexnpu, _ = driver_for(tmp_path)

    assert driver.unregister(A) is True

    assert flexnpu.calls() == [["info"], ["unregister", "-u", "1"]]
    assert A not in {i.entity_id for i in driver.instances()}


def test_unregister_removes_every_card_of_a_multi_card_instance(tmp_path):
    driver, flexnpu, _ = driver_for(tmp_path)

    assert driver.unregister(E) is True

    assert flexnpu.unregister_calls() == [["unregister", "-u", "6"], ["unregister", "-u", "7"]]


def test_unregister_of_an_unknown_instance_is_false_and_runs_no_unregister(tmp_path):
    driver, flexnpu, _ = driver_for(tmp_path)

    assert driver.unregister(UNKNOWN) is False
    assert flexnpu.unregister_calls() == []


def test_unregistering_twice_removes_once(tmp_path):
    driver, flexnpu, _ = driver_for(tmp_path)

    assert driver.unregister(A) is True
    assert driver.unregister(A) is False
    assert flexnpu.unregister_calls() == [["unregister", "-u", "1"]]


@pytest.mark.parametrize(
    "output",
    [
        "flexnpu_smi_info_truncated.txt",
        "flexnpu_smi_info_truncated_row.txt",
        "flexnpu_smi_info_garbled.bin",
        "flexnpu_smi_info_empty.txt",
        "flexnpu_smi_info_wrong_columns.txt",
    ],
)
def test_output_that_does_not_parse_means_no_unregister(tmp_path, output):
    driver, flexnpu, _ = driver_for(tmp_path, flexnpu_output=output)

    with pytest.raises(DriverError, match=r"'.*flexnpu-smi info' printed output that did not parse \(line \d+: "):
        driver.unregister(A)

    assert flexnpu.calls() == [["info"]]
    assert flexnpu.unregister_calls() == []


def test_the_parse_error_tells_the_operator_how_to_check_the_format(tmp_path):
    driver, _, _ = driver_for(tmp_path, flexnpu_output="flexnpu_smi_info_truncated.txt")

    with pytest.raises(DriverError, match=r"python -m nodeagent\.parsers flexnpu-smi out\.txt"):
        driver.instances()


def test_a_failing_command_raises_with_its_status_and_message(tmp_path):
    driver, flexnpu, _ = driver_for(tmp_path, exit_code=3, stderr="flexnpu-daemon is not running\n")

    with pytest.raises(DriverError, match=r"flexnpu-smi info' exited with status 3: flexnpu-daemon is not running$"):
        driver.unregister(A)
    assert flexnpu.unregister_calls() == []


def test_a_failing_unregister_raises(tmp_path):
    driver, flexnpu, _ = driver_for(tmp_path, unregister_exit_code=1)

    with pytest.raises(DriverError, match=r"flexnpu-smi unregister -u 1' exited with status 1"):
        driver.unregister(A)


def test_a_command_that_hangs_is_killed_after_the_timeout(tmp_path):
    flexnpu = fake_cli(tmp_path / "bin", "flexnpu-smi", "flexnpu_smi_info_several.txt", sleep_seconds=60)
    driver = FlexnpuSmiDriver(binary=str(flexnpu.path), timeout_seconds=0.5)
    started = time.monotonic()

    with pytest.raises(DriverError, match=r"flexnpu-smi info' did not finish within 0\.5 s"):
        driver.unregister(A)

    assert time.monotonic() - started < 10
    assert flexnpu.unregister_calls() == []


def test_a_missing_binary_raises(tmp_path):
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "no-such-flexnpu-smi"))

    with pytest.raises(DriverError, match=r"cannot run '.*no-such-flexnpu-smi': No such file or directory"):
        driver.instances()


def test_the_default_commands_are_found_on_path(tmp_path, monkeypatch):
    _, flexnpu, npu = driver_for(tmp_path)
    monkeypatch.setenv("PATH", str(flexnpu.path.parent), prepend=":")
    driver = FlexnpuSmiDriver()

    assert len(driver.instances()) == 6
    assert len(driver.inventory()) == 8


def test_it_does_not_register_instances(tmp_path):
    driver, _, _ = driver_for(tmp_path)

    with pytest.raises(NotSupported, match="device plugin"):
        driver.register(A, 0, 10, 1024)
    with pytest.raises(NotSupported):
        driver.set_demand(A, 50)


def test_an_npu_smi_output_cut_inside_its_last_rule_is_refused_not_read_as_a_one_card_node(tmp_path):
    driver, _, npu = driver_for(tmp_path, npu_output="npu_smi_info_last_rule_cut.txt")

    with pytest.raises(DriverError, match=r"npu-smi info' printed output that did not parse \(line 9: the output ends with"):
        driver.inventory()
    assert npu.calls() == [["info"]]
