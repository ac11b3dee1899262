"""The host limits the local driver applies to a lab process (labs.drivers.limits), on real child processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from labs.drivers import limits

LIMITS = str(Path(limits.__file__))
ALLOCATE = "import sys; b = bytearray(int(sys.argv[1]) * 1024 * 1024); print('allocated', len(b) // 1048576)"


def run_limited(memory_mib: int, allocate_mib: int, nice: int = 0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            LIMITS,
            f"--memory-mib={memory_mib}",
            f"--nice={nice}",
            "--",
            sys.executable,
            "-c",
            ALLOCATE,
            str(allocate_mib),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_limited_process_that_allocates_beyond_its_limit_fails() -> None:
    result = run_limited(memory_mib=512, allocate_mib=1024)

    assert result.returncode != 0
    assert "MemoryError" in result.stderr


def test_a_limited_process_within_its_limit_runs() -> None:
    result = run_limited(memory_mib=512, allocate_mib=64)

    assert result.returncode == 0, result.stderr
    assert "allocated 64" in result.stdout


def test_the_limit_and_the_niceness_reach_the_program_and_its_children() -> None:
    script = (
        "import os, resource, subprocess, sys; "
        "print(resource.getrlimit(resource.RLIMIT_AS)[0] // 1048576, os.nice(0)); "
        "subprocess.run([sys.executable, '-c', 'import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] // 1048576)'])"
    )
    result = subprocess.run(
        [sys.executable, LIMITS, "--memory-mib=700", "--nice=5", "--", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    parent, child = result.stdout.split("\n")[:2]
    assert parent.split()[0] == "700"
    assert int(parent.split()[1]) >= 5
    assert child == "700"


def test_the_local_driver_starts_jupyterlab_under_the_limits(tmp_path) -> None:
    from dataclasses import replace

    from labs.drivers.base import HostResources
    from labs.drivers.local import LAB_NICENESS, LocalDriver
    from tests.drivers.helpers import make_spec

    driver = LocalDriver(state_dir=str(tmp_path / "state"))
    spec = replace(make_spec(), host=HostResources(500, 1000, 2048, 3072, 1024))
    driver.create(spec)
    try:
        record = driver.state.read(spec.session_id)
        pid = record["pid"]
        # The launcher sets the limits, then execs JupyterLab in the same process: wait for it.
        deadline = time.monotonic() + 10
        while True:
            text = Path(f"/proc/{pid}/limits").read_text()
            address = next(line for line in text.splitlines() if line.startswith("Max address space"))
            if address.split()[3] != "unlimited" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert address.split()[3] == str(3072 * 1024 * 1024)
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        assert int(stat[16]) >= LAB_NICENESS  # field 19 of stat: nice
    finally:
        driver.delete(spec.session_id)
