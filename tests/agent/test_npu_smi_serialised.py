"""npu-smi must not run twice at once (vendor rule): the agent serialises its vendor commands and
reuses npu-smi's output briefly. Checked with real threads through the HTTP server, against a
fake npu-smi that detects an overlapping run."""

from __future__ import annotations

import json
import sys
import threading

import pytest

from nodeagent.cards.flexnpu_smi import FlexnpuSmiDriver
from tests.agent.helpers import FIXTURES, call, fake_cli, running

OVERLAP_DETECTING_NPU_SMI = """#!{python}
# Fails, and leaves an 'overlap' file, when another copy of itself is running.
import os, pathlib, sys, time
here = pathlib.Path(__file__).resolve().parent
try:
    fd = os.open(here / "running", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
except FileExistsError:
    (here / "overlap").write_text("two npu-smi runs at once")
    sys.stderr.write("npu-smi is already running\\n")
    sys.exit(9)
try:
    with open(here / "runs", "a") as runs:
        runs.write(" ".join(sys.argv[1:]) + "\\n")
    time.sleep({seconds})
    sys.stdout.buffer.write(pathlib.Path({output!r}).read_bytes())
finally:
    os.close(fd)
    os.unlink(here / "running")
"""


def overlap_detecting_npu_smi(directory, seconds=0.2):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "npu-smi"
    path.write_text(
        OVERLAP_DETECTING_NPU_SMI.format(python=sys.executable, seconds=seconds, output=str(FIXTURES / "npu_smi_info_910b.txt"))
    )
    path.chmod(0o755)
    return path


def hammer(server, paths):
    """Request every path from its own thread, all released at once; the statuses."""
    barrier = threading.Barrier(len(paths))
    statuses = [None] * len(paths)

    def one(n, path):
        barrier.wait()
        statuses[n] = call(server, "GET", path).status

    threads = [threading.Thread(target=one, args=(n, path)) for n, path in enumerate(paths)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return statuses


def driver_with(tmp_path, cache_seconds):
    npu_smi = overlap_detecting_npu_smi(tmp_path / "bin")
    flexnpu = fake_cli(tmp_path / "bin", "flexnpu-smi", "flexnpu_smi_info_several.txt")
    driver = FlexnpuSmiDriver(binary=str(flexnpu.path), npu_smi=str(npu_smi), npu_smi_cache_seconds=cache_seconds)
    return driver, tmp_path / "bin"


def test_inventory_and_metrics_at_once_never_run_npu_smi_concurrently(tmp_path):
    driver, bin_dir = driver_with(tmp_path, cache_seconds=0)

    with running(driver) as server:
        statuses = hammer(server, ["/v1/inventory", "/metrics"] * 3)

    assert statuses == [200] * 6
    assert not (bin_dir / "overlap").exists()
    assert (bin_dir / "runs").read_text().splitlines().count("info") == 6


def test_requests_within_the_cache_lifetime_share_one_npu_smi_run(tmp_path):
    driver, bin_dir = driver_with(tmp_path, cache_seconds=60)

    with running(driver) as server:
        statuses = hammer(server, ["/v1/inventory", "/metrics"] * 3)
        body = json.loads(call(server, "GET", "/v1/inventory").body)

    assert statuses == [200] * 6
    assert len(body["cards"]) == 8
    assert (bin_dir / "runs").read_text().splitlines().count("info") == 1


def test_a_negative_cache_lifetime_is_refused():
    with pytest.raises(ValueError, match="0 or more seconds, got -1"):
        FlexnpuSmiDriver(npu_smi_cache_seconds=-1)
