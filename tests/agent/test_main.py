"""python -m nodeagent: starts with a token, serves, stops on SIGTERM; refuses to start without a token."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.__main__ import build_driver, parse_args
from nodeagent.client import AgentClient
from tests.agent.helpers import TOKEN

ROOT = Path(__file__).resolve().parents[2]


def agent_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **extra)
    return env


def start(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", *args], cwd=ROOT, env=agent_env(**env), stdout=out, stderr=subprocess.STDOUT
        )
    return process, log


def wait_for_url(process: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        match = re.search(r"listening on (http://\S+)", log.read_text())
        if match:
            return match[1]
        if process.poll() is not None:
            pytest.fail(f"the agent exited with {process.returncode}: {log.read_text()}")
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"the agent did not start: {log.read_text()}")


def test_the_agent_serves_until_sigterm(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    process, log = start(
        tmp_path, "--driver", "simulated", "--port", "0", "--cards", "2", AGENT_NODE="n7", AGENT_TOKEN_FILE=str(token_file)
    )
    try:
        url = wait_for_url(process, log)
        client = AgentClient(url, TOKEN)
        assert client.health().node == "n7"
        assert len(client.inventory()) == 2
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    assert TOKEN not in log.read_text()


def test_the_agent_refuses_to_start_without_a_token(tmp_path):
    process, log = start(tmp_path, "--driver", "simulated", "--port", "0")

    assert process.wait(timeout=20) == 2
    assert "refusing to start without a token: set AGENT_TOKEN or AGENT_TOKEN_FILE" in log.read_text()


def test_the_agent_says_when_the_token_file_cannot_be_read(tmp_path):
    process, log = start(tmp_path, "--driver", "simulated", AGENT_TOKEN_FILE=str(tmp_path / "missing"))

    assert process.wait(timeout=20) == 2
    assert f"cannot read the token file {tmp_path / 'missing'}: No such file or directory" in log.read_text()


def test_the_agent_needs_a_driver(tmp_path):
    process, log = start(tmp_path, AGENT_TOKEN=TOKEN)

    assert process.wait(timeout=20) == 2
    assert "choose a driver: --driver simulated|flexnpu-smi (or AGENT_DRIVER)" in log.read_text()


def test_the_npu_smi_cache_lifetime_is_an_option_and_an_environment_variable(monkeypatch):
    monkeypatch.delenv("AGENT_NPU_SMI_CACHE_SECONDS", raising=False)
    default = build_driver(parse_args(["--driver", "flexnpu-smi", "--token", TOKEN]))
    chosen = build_driver(parse_args(["--driver", "flexnpu-smi", "--token", TOKEN, "--npu-smi-cache", "0.5"]))
    monkeypatch.setenv("AGENT_NPU_SMI_CACHE_SECONDS", "7")
    from_env = build_driver(parse_args(["--driver", "flexnpu-smi", "--token", TOKEN]))

    assert (default.npu_smi_cache_seconds, chosen.npu_smi_cache_seconds, from_env.npu_smi_cache_seconds) == (2, 0.5, 7)


def test_the_agent_refuses_a_negative_npu_smi_cache_lifetime(tmp_path):
    process, log = start(tmp_path, "--driver", "flexnpu-smi", AGENT_TOKEN=TOKEN, AGENT_NPU_SMI_CACHE_SECONDS="-3")

    assert process.wait(timeout=20) == 2
    assert "the npu-smi cache lifetime must be 0 or more seconds, got -3" in log.read_text()
