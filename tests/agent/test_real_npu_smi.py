"""Real ``npu-smi info`` outputs copied from public issues, documents and tests (``fixtures/real/``,
each with a ``.source`` file naming its URL and device): every complete one parses with the
right numbers, every cut or error one is refused with its line.

``*_excerpt.txt`` files are real pastes we only have in part (the issue index returned a window
of them): each is the paste's first lines up to a complete rule line, said so in its
``.source``. They check real chip rows (two chips per NPU, first-generation 910, 26.x width),
not the end of a real output."""

from __future__ import annotations

import pytest

from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from nodeagent.parsers.npu_smi import NpuProcess, chip_type, parse_npu_smi_info
from nodeagent.parsers.text import ParseError
from nodeagent.wire import CardReport
from tests.agent.helpers import FIXTURES, fake_cli

REAL = FIXTURES / "real"

# name -> (version, NPUs, [(npu, chip, device, name, used MiB, total MiB, kind, health)], processes)
COMPLETE = {
    "nputop_910b2c_23.0.2.1.txt": (
        "23.0.2.1",
        2,
        [(0, 0, None, "910B2C", 20701, 65536, "HBM", "OK"), (1, 0, None, "910B2C", 20687, 65536, "HBM", "OK")],
        [NpuProcess(npu_id=0, chip_id=0, pid=124528, name="python3.8", memory_mib=17400, container_pid=None)],
    ),
    "vllm_ascend_198_910b3_23.0.7.txt": (
        "23.0.7",
        8,
        [
            (n, 0, None, "910B3", used, 65536, "HBM", "OK")
            for n, used in enumerate([3338, 3337, 3334, 3334, 3334, 3334, 3334, 3338])
        ],
        [],
    ),
    "mindxsdk_styletransfer_310_21.0.3.1.txt": ("21.0.3.1", 1, [(0, 0, 0, "310", 5324, 8192, "DDR", "OK")], []),
    "nputop_310b4_23.0.0.txt": ("23.0.0", 1, [(0, 0, 0, "310B4", 3628, 15609, "DDR", "Alarm")], []),
    "nputop_a3_25.2.0.txt": (
        "25.2.0",
        2,
        [
            (0, 0, 0, "Ascend910", 3133, 65536, "HBM", "OK"),
            (0, 1, 1, "Ascend910", 2876, 65536, "HBM", "OK"),
            (1, 0, 2, "Ascend910", 3116, 65536, "HBM", "OK"),
            (1, 1, 3, "Ascend910", 10568, 65536, "HBM", "OK"),
        ],
        [NpuProcess(npu_id=1, chip_id=1, pid=990711, name="python", memory_mib=7746, container_pid=None)],
    ),
}

ERROR = "npu-smi printed an error instead of the table: "
EXCERPTS = {
    "nvtop_421_310p3_duo_25.2.0_excerpt.txt": (
        "25.2.0",
        1,
        [(2, 0, 0, "310P3", 1529, 44280, "DDR", "OK"), (2, 1, 1, "310P3", 1412, 43693, "DDR", "OK")],
        [],
    ),
    "vllm_ascend_1047_910prob_24.1.0_excerpt.txt": (
        "24.1.0",
        2,
        [(0, 0, None, "910ProB", 18, 32768, "HBM", "OK"), (1, 0, None, "910ProB", 8, 32768, "HBM", "OK")],
        [],
    ),
    "onepanel_9472_910b4_32g_24.1.1_excerpt.txt": ("24.1.1", 1, [(0, 0, None, "910B4", 26838, 32768, "HBM", "OK")], []),
    "vllm_ascend_3403_910b1_24.1.0_excerpt.txt": (
        "24.1.0",
        2,
        [(0, 0, None, "910B1", 3418, 65536, "HBM", "OK"), (1, 0, None, "910B1", 3405, 65536, "HBM", "OK")],
        [],
    ),
    "vllm_ascend_676_910b2c_24.1.rc2.2_excerpt.txt": (
        "24.1.rc2.2",
        2,
        [(0, 0, None, "910B2C", 3373, 65536, "HBM", "OK"), (1, 0, None, "910B2C", 3378, 65536, "HBM", "OK")],
        [],
    ),
    "vllm_ascend_4284_910b2_25.2.0_excerpt.txt": (
        "25.2.0",
        2,
        [(0, 0, None, "910B2", 3382, 65536, "HBM", "OK"), (1, 0, None, "910B2", 3381, 65536, "HBM", "OK")],
        [],
    ),
    "vllm_ascend_3542_910b4-1_25.0.rc1.1_excerpt.txt": (
        "25.0.rc1.1",
        2,
        [(0, 0, None, "910B4-1", 3381, 65536, "HBM", "OK"), (1, 0, None, "910B4-1", 3381, 65536, "HBM", "OK")],
        [],
    ),
    "vllm_ascend_12980_a3_26.0.rc2_wide_excerpt.txt": ("26.0.rc2", 1, [(0, 0, 0, "Ascend910", 3419, 65536, "HBM", "OK")], []),
    "vllm_omni_3597_a3_25.5.0_excerpt.txt": ("25.5.0", 1, [(0, 0, 0, "Ascend910", 56152, 65536, "HBM", "OK")], []),
}

# name -> (line, reason starts with)
REFUSED = {
    "hami_webui_47_910b4-1_25.2.0_cut.txt": (11, "the output does not end with a rule line (truncated?)"),
    "arthurchiao_910b1_23.0.rc2_elided.txt": (14, "expected a table row starting with '|', got '...'"),
    "cann_container_image_46_error_8020.txt": (3, f"{ERROR}'dcmi model initialized failed, because the device is used."),
    "vllm_ascend_2698_error_8005.txt": (2, f"{ERROR}'dcmi module initialize failed. ret is -8005'"),
}


def test_every_real_fixture_cites_its_public_source_and_has_expectations():
    names = sorted(path.name for path in REAL.glob("*.txt"))

    assert names == sorted([*COMPLETE, *EXCERPTS, *REFUSED])
    for name in names:
        source = (REAL / f"{name}.source").read_text()
        assert source.startswith("source: https://"), name
        assert "\nwhat: " in source, name
        assert ("\ncopied: EXCERPT, shortened by us: " in source) == (name in EXCERPTS), name


@pytest.mark.parametrize("name", sorted([*COMPLETE, *EXCERPTS]))
def test_a_complete_real_output_parses_with_the_right_numbers(name):
    version, npus, chips, processes = {**COMPLETE, **EXCERPTS}[name]

    info = parse_npu_smi_info((REAL / name).read_bytes())

    assert info.version == version
    assert len({c.npu_id for c in info.chips}) == npus
    assert [
        (c.npu_id, c.chip_id, c.device_id, c.name, c.memory_used_mib, c.memory_total_mib, c.memory_kind, c.health)
        for c in info.chips
    ] == chips
    assert info.processes == processes


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_cut_or_failed_real_output_is_refused_with_its_line(name):
    line, reason = REFUSED[name]

    with pytest.raises(ParseError) as caught:
        parse_npu_smi_info((REAL / name).read_bytes())

    assert caught.value.line == line
    assert caught.value.reason.startswith(reason)


def test_an_a3_node_is_inventoried_chip_by_chip_with_each_chips_memory(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "real/nputop_a3_25.2.0.txt")
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path), npu_smi_cache_seconds=0)

    cards = driver.inventory()

    assert [(c.index, c.chip_type, c.memory_total_mib, c.memory_used_mib) for c in cards] == [
        (0, "Ascend910C", 65536, 3133),
        (1, "Ascend910C", 65536, 2876),
        (2, "Ascend910C", 65536, 3116),
        (3, "Ascend910C", 65536, 10568),
    ]


def test_a_chip_using_memory_with_no_process_listed_is_not_reported_idle(tmp_path):
    # NPU 0 of this A3 lists no process, yet its chips hold 3133 and 2876 MiB: a workload in
    # another container. The inventory reports the memory, whatever the process table says.
    npu = fake_cli(tmp_path / "bin", "npu-smi", "real/nputop_a3_25.2.0.txt")
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path), npu_smi_cache_seconds=0)

    card = driver.inventory()[0]

    assert card == CardReport(
        index=0,
        die_id="",
        chip_type="Ascend910C",
        memory_total_mib=65536,
        memory_used_mib=3133,
        aicore_percent=0,
        healthy=True,
        power_milliwatts=162800,
        temperature_celsius=37,
    )


def test_a_310b_board_is_inventoried_with_its_ddr_and_its_alarm(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "real/nputop_310b4_23.0.0.txt")
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path))

    assert driver.inventory() == [CardReport(0, "", "Ascend310B4", 15609, 3628, 0, False, 0, 65)]
    assert chip_type("310B4", 15609) == "Ascend310B4"


def test_a_300i_duo_is_inventoried_as_two_cards_with_their_own_memory(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "real/nvtop_421_310p3_duo_25.2.0_excerpt.txt")
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path))

    assert [(c.index, c.chip_type, c.memory_total_mib, c.memory_used_mib) for c in driver.inventory()] == [
        (0, "Ascend310P3", 44280, 1529),
        (1, "Ascend310P3", 43693, 1412),
    ]


def test_a_first_generation_910_is_not_stored_as_a_910b(tmp_path):
    npu = fake_cli(tmp_path / "bin", "npu-smi", "real/vllm_ascend_1047_910prob_24.1.0_excerpt.txt")
    driver = FlexnpuSmiDriver(binary=str(tmp_path / "bin" / "absent"), npu_smi=str(npu.path))

    assert {(c.chip_type, c.memory_total_mib) for c in driver.inventory()} == {("Ascend910", 32768)}
