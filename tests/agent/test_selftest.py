"""``python -m nodeagent selftest`` against a live portal, with the fake reporter."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labs.drivers import get_driver
from labs.models import Card, LabSession
from labs.services.controller import reconcile_once
from labs.services.sessions import session_launch
from nodeagent import selftest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def running(world, live_server):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    reconcile_once()
    session.refresh_from_db()
    yield session
    driver = get_driver()
    for session_id in driver.list():
        driver.delete(session_id)


def lab_env(session, portal, **extra):
    """What a lab container has: its session id, cap, secret (as Jupyter's token) and the portal's URL."""
    return {
        "LAB_SESSION_ID": str(session.pk),
        "FLEXNPU_MEMORY_MIB": str(session.allocation.memory_mib),
        "JUPYTER_TOKEN": session.secret,
        "NPU_LAB_PORTAL_URL": portal,
        **extra,
    }


def test_a_lab_that_sees_only_its_cap_reports_and_exits_0(running, live_server, capsys):
    env = lab_env(running, live_server.url, NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB="4096", NPU_LAB_SELFTEST_FAKE_PROBE_MIB="4096")

    assert selftest.main(["--probe"], env) == 0

    running.refresh_from_db()
    assert (running.selftest_visible_mib, running.selftest_probe_exceeded, running.selftest_over_cap) == (4096, False, False)
    assert "within the cap" in capsys.readouterr().out


def test_a_half_card_share_that_sees_24_gib_exits_1_and_the_card_is_suspect(running, live_server):
    """HAMi#1860: a half-card share used 24 of 32 GB."""
    env = lab_env(running, live_server.url, NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB="24576")

    result = subprocess.run(
        [sys.executable, "-m", "nodeagent", "selftest"],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1, result.stderr
    assert "OVER THE CAP" in result.stdout and running.secret not in result.stdout + result.stderr
    assert LabSession.objects.get(pk=running.pk).selftest_over_cap is True
    assert Card.objects.get(pk=running.allocation.card_id).isolation_suspect is True


def test_a_wrong_secret_is_refused_by_the_portal_with_exit_3(running, live_server, capsys):
    env = lab_env(running, live_server.url, NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB="99999", JUPYTER_TOKEN="guess")

    assert selftest.main([], env) == 3

    assert "refused the report (404)" in capsys.readouterr().err
    assert LabSession.objects.get(pk=running.pk).selftest_visible_mib == 4096  # the simulator's own report


def test_an_unreachable_portal_exits_3_within_the_timeout(running, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = lab_env(running, f"http://127.0.0.1:{port}", NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB="1")

    assert selftest.main(["--timeout", "2"], env) == 3
    assert "cannot reach the portal" in capsys.readouterr().err


def test_missing_settings_exit_2_naming_them(capsys):
    assert selftest.main(["--probe"], {"NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB": "1"}) == 2

    err = capsys.readouterr().err
    assert "--portal" in err and "--session" in err and "session secret" in err and "--cap-mib" in err


def test_a_fake_reporter_that_allows_more_than_the_cap_reports_the_probe_as_exceeded():
    reporter = selftest.pick_reporter({"NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB": "4096", "NPU_LAB_SELFTEST_FAKE_PROBE_MIB": "8192"})

    assert reporter.can_allocate_mib(4096 + selftest.PROBE_STEP_MIB) is True


def entrypoint(tmp_path, **env):
    script = ROOT / "deploy" / "lab-image" / "entrypoint.sh"
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    return subprocess.run(
        ["sh", str(script), "sh", "-c", f"echo lab started > {tmp_path}/started"],
        env={"PATH": path, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_entrypoint_runs_the_lab_command_after_the_self_test(tmp_path):
    result = entrypoint(tmp_path)

    assert result.returncode == 0 and (tmp_path / "started").read_text() == "lab started\n"
    assert "no isolation self-test" in result.stderr


def test_the_entrypoint_refuses_to_start_when_the_self_test_is_required_and_fails(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = entrypoint(
        tmp_path,
        NPU_LAB_PORTAL_URL=f"http://127.0.0.1:{port}",
        LAB_SESSION_ID="s",
        JUPYTER_TOKEN="t",
        NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB="1",
        NPU_LAB_SELFTEST_TIMEOUT_SECONDS="2",
        NPU_LAB_SELFTEST_REQUIRED="1",
    )

    assert result.returncode == 3 and not (tmp_path / "started").exists()
    assert "cannot reach the portal" in result.stderr


def test_a_kubernetes_jupyterlab_pod_reads_its_secret_from_the_token_file(running, live_server, tmp_path):
    """The Kubernetes driver mounts the token as a file (JUPYTER_TOKEN_FILE), not in the environment."""
    token_file = tmp_path / "token"
    token_file.write_text(running.secret + "\n")
    env = lab_env(running, live_server.url, NPU_LAB_SELFTEST_FAKE_VISIBLE_MIB="4096", JUPYTER_TOKEN_FILE=str(token_file))
    del env["JUPYTER_TOKEN"]

    assert selftest.main([], env) == 0
    assert LabSession.objects.get(pk=running.pk).selftest_visible_mib == 4096


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_a_token_file_that_cannot_be_read_or_is_empty_exits_2_naming_it(tmp_path, capsys, content):
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    env = {"LAB_SESSION_ID": "x", "NPU_LAB_PORTAL_URL": "http://127.0.0.1:9", "JUPYTER_TOKEN_FILE": str(token_file)}

    assert selftest.main([], env) == 2
    err = capsys.readouterr().err
    assert f"JUPYTER_TOKEN_FILE={token_file}" in err
    assert ("cannot read" if content is None else "is empty") in err
