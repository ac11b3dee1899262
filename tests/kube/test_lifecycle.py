"""The cluster starts from the command line, and stopping it leaves no process and no folder behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labs.devcluster.binaries import ControlPlaneNotBuilt, Release, require_built
from labs.devcluster.cluster import DevCluster, processes_using
from tests.kube.conftest import wait_for

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def command_line_cluster(directory: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """``python -m labs.devcluster`` with one node, until it has printed where it is; killed at the end if still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "labs.devcluster", "--nodes", "1", "--dir", str(directory)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        printed: dict[str, str] = {}
        for line in process.stdout:
            key, _, value = line.partition(":")
            printed[key.strip()] = value.strip()
            if line.startswith("Ctrl-C"):
                break
        else:
            pytest.fail(f"python -m labs.devcluster ended with {process.wait()}: {printed}")
        yield process, printed
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def _components(directory: Path, cli: subprocess.Popen[str]) -> list[tuple[int, str]]:
    return [(pid, command) for pid, command in processes_using(directory) if pid != cli.pid]


def test_the_command_line_prints_the_server_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    with command_line_cluster(directory) as (process, printed):
        nodes = subprocess.run(
            [str(require_built().binary("kubectl")), f"--kubeconfig={printed['kubeconfig']}", "get", "nodes", "-o", "name"],
            capture_output=True, text=True, check=True,
        )
        assert printed["API server"].startswith("https://127.0.0.1:")
        assert nodes.stdout.split() == ["node/npu-node-1"]
        assert {command.split()[0].rsplit("/", 1)[-1] for _pid, command in _components(directory, process)} == {
            "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"
        }

        process.send_signal(signal.SIGTERM)

        assert process.wait(60) == 0
    assert list(processes_using(directory)) == []
    assert not directory.exists()


def test_the_components_die_with_the_process_that_started_them(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    with command_line_cluster(directory) as (process, _printed):
        assert len(_components(directory, process)) == 4

        process.kill()  # no teardown runs: the components must go by themselves
        process.wait()

        wait_for("every component gone", lambda: not list(processes_using(directory)), timeout=30)


def test_missing_binaries_name_the_make_target(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneNotBuilt, match=r"not built in .*: run `make controlplane`"):
        require_built(Release("v1.35.4", "v3.6.5", tmp_path))


def test_the_cluster_refuses_to_start_without_its_binaries(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ControlPlaneNotBuilt, match="make controlplane"):
        DevCluster(tmp_path / "cluster", release=Release("v1.35.4", "v3.6.5", tmp_path / "empty"))

    assert time.monotonic() - started < 5
    assert os.listdir(tmp_path) == []
