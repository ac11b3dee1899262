"""Device-share mode from ``npu-smi info -t device-share``, the openFuyao vNPU's precondition, in the
agent's inventory; an output that is cut or wrong is refused, and a node that cannot tell says so."""

from __future__ import annotations

import pytest

from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.cards.simulated import SimulatedDriver
from nodeagent.client import AgentClient, AgentUnavailable
from nodeagent.parsers.npu_smi import parse_npu_smi_device_share
from nodeagent.parsers.text import ParseError
from tests.agent.helpers import FIXTURES, TOKEN, fake_cli, running
from tests.agent.test_client import canned_client


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_each_npus_device_share_mode_is_read():
    assert parse_npu_smi_device_share(fixture("npu_smi_device_share_on.txt")) == {0: True, 1: True}
    assert parse_npu_smi_device_share(fixture("npu_smi_device_share_off.txt")) == {0: True, 1: False}


def test_an_npu_is_shared_only_when_every_chip_of_it_is():
    two_chips = (
        "\tNPU ID                         : 0\n\tChip Count                     : 2\n\n"
        "\tDevice-share Status            : True\n\tChip ID                        : 0\n"
        "\tDevice-share Status            : False\n\tChip ID                        : 1\n"
    )
    assert parse_npu_smi_device_share(two_chips) == {0: False}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (fixture("npu_smi_device_share_cut.txt"), "line 8: NPU 1 (line 7) has no Device-share Status (truncated?)"),
        ("\tNPU ID : 0\n\tDevice-share Status : Enabled\n", "line 2: Device-share Status: expected True or False, got 'Enabled'"),
        ("\tNPU ID : 0\n\tDevice-share Status : True\n\tNPU ID : 0\n\tDevice-share Status : True\n", "NPU 0 is already listed"),
        ("\tDevice-share Status : True\n", "line 1: Device-share Status before any NPU ID"),
        ("dcmi module initialize failed. ret is -8005\n", "npu-smi printed an error instead of the device-share mode"),
        ("Usage: npu-smi info -t <type>\n", "no 'NPU ID : ...' line"),
    ],
)
def test_a_device_share_output_that_cannot_be_trusted_is_refused(text, message):
    with pytest.raises(ParseError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        parse_npu_smi_device_share(text)


def test_the_npu_smi_driver_reports_device_share_and_reads_it_once_per_cache_period(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", device_share="npu_smi_device_share_off.txt")
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path))

    assert driver.device_share() is False
    assert driver.device_share() is False
    assert [argv for argv in npu.calls() if argv[:3] == ["info", "-t", "device-share"]] == [["info", "-t", "device-share"]]


def test_an_npu_smi_that_knows_no_device_share_leaves_it_unknown(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt")  # exits 64 on "-t device-share"
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path))

    assert driver.device_share() is None


def test_the_inventory_carries_device_share_to_the_portal(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "npu_smi_info_910b.txt", device_share="npu_smi_device_share_on.txt")
    with running(FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path))) as server:
        assert AgentClient(server.url, TOKEN).inventory_report().device_share is True
    with running(SimulatedDriver(device_share=False)) as server:
        assert AgentClient(server.url, TOKEN).inventory_report().device_share is False


def test_an_agent_that_predates_device_share_reports_it_unknown_and_a_wrong_value_is_refused():
    server, client = canned_client(200, b'{"cards": [], "host": null, "versions": null}')
    try:
        assert client.inventory_report().device_share is None
    finally:
        server.shutdown()
        server.server_close()
    server, client = canned_client(200, b'{"cards": [], "device_share": 1}')
    try:
        with pytest.raises(AgentUnavailable, match="device_share is 1"):
            client.inventory_report()
    finally:
        server.shutdown()
        server.server_close()
