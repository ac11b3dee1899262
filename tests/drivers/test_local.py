"""The local driver really runs JupyterLab: token, environment, process lifetime."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from labs.drivers import DriverError, LaunchSpec, PollStatus
from labs.drivers.local import LocalDriver
from tests.drivers.helpers import make_spec, wait_for

PROJECT_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc to inspect the server process")


@dataclass
class Lab:
    driver: LocalDriver
    spec: LaunchSpec
    record: dict
    access_url: str


def http_status(url: str, headers: dict[str, str] | None = None) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def http_text(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return response.read().decode()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def process_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def start(driver: LocalDriver) -> Lab:
    spec = make_spec()
    driver.create(spec)
    result = wait_for(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED)
    assert result.status == PollStatus.RUNNING, result.reason
    return Lab(driver, spec, driver.state.read(spec.session_id), result.access_url)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One server shared by the tests that only look at it."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SECRET_KEY", "portal-secret-key")
        env.setenv("DATABASE_URL", "postgres://portal:hunter2@db/portal")
        env.setenv("PGPASSWORD", "hunter2")
        env.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
        env.setenv("SOME_CERT_FILE", "/etc/portal/key.pem")
        env.setenv("LAB_HARMLESS_SETTING", "kept")
        driver = LocalDriver(state_dir=str(tmp_path_factory.mktemp("local") / "state"))
        lab = start(driver)
    yield lab
    driver.shutdown()


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[LocalDriver]:
    driver = LocalDriver(state_dir=str(tmp_path / "state"))
    yield driver
    driver.shutdown()


def test_the_server_answers_with_the_session_token(lab: Lab) -> None:
    url = f"http://127.0.0.1:{lab.record['port']}/api/status"

    assert http_status(url, {"Authorization": f"token {lab.spec.secret}"}) == 200
    assert http_status(lab.access_url) == 200


def test_the_server_refuses_requests_without_the_token(lab: Lab) -> None:
    port = lab.record["port"]

    assert http_status(f"http://127.0.0.1:{port}/api/status") in (401, 403)
    assert http_status(f"http://127.0.0.1:{port}/api/status", {"Authorization": "token wrong"}) in (401, 403)
    assert http_status(f"http://127.0.0.1:{port}/lab") in (302, 401, 403)


def test_the_access_url_has_the_configured_host_and_the_token(lab: Lab) -> None:
    assert lab.access_url == f"http://127.0.0.1:{lab.record['port']}/lab?token={lab.spec.secret}"


def test_jupyterlab_opens_without_asking_about_news(lab: Lab) -> None:
    page = http_text(lab.access_url)
    page_config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)[1])

    # The plugin that asks "Would you like to get notified about official Jupyter news?".
    assert "@jupyterlab/apputils-extension:announcements" in page_config["disabledExtensions"]
    assert page_config["token"] == lab.spec.secret


def test_the_instance_environment_reaches_the_server(lab: Lab) -> None:
    environment = process_environment(lab.record["pid"])

    assert {name: environment.get(name) for name in lab.spec.instance_environment()} == lab.spec.instance_environment()
    assert environment["FLEXNPU_CORE_PERCENT"] == "25"
    assert environment["LAB_HARMLESS_SETTING"] == "kept"


def test_portal_secrets_do_not_reach_the_server(lab: Lab) -> None:
    environment = process_environment(lab.record["pid"])

    for name in ("SECRET_KEY", "DATABASE_URL", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "SOME_CERT_FILE"):
        assert name not in environment
    assert not any("hunter2" in value for value in environment.values())


def test_the_token_is_not_on_the_command_line(lab: Lab) -> None:
    cmdline = Path(f"/proc/{lab.record['pid']}/cmdline").read_bytes()

    assert b"jupyterlab" in cmdline
    assert lab.spec.secret.encode() not in cmdline


def test_the_server_runs_in_its_own_process_group(lab: Lab) -> None:
    assert os.getpgid(lab.record["pid"]) == lab.record["pgid"] == lab.record["pid"]
    assert lab.record["pgid"] != os.getpgid(0)


def test_the_record_holding_the_token_is_private(lab: Lab) -> None:
    state_dir = lab.driver.state.path

    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((state_dir / f"{lab.spec.session_id}.json").stat().st_mode) == 0o600


def test_a_vllm_template_is_refused(driver: LocalDriver) -> None:
    with pytest.raises(DriverError, match="kubernetes driver"):
        driver.create(make_spec(kind="vllm", image="vllm/vllm-openai:latest"))

    assert driver.list() == set()


def test_delete_stops_the_whole_process_group_and_removes_the_work_dir(driver: LocalDriver) -> None:
    lab = start(driver)
    session_dir = driver.state.path / "sessions" / lab.spec.session_id
    assert session_dir.is_dir()

    driver.delete(lab.spec.session_id)

    assert not group_exists(lab.record["pgid"])
    assert not session_dir.exists()


def test_delete_stops_the_kernels_too(driver: LocalDriver) -> None:
    lab = start(driver)
    request = urllib.request.Request(
        f"http://127.0.0.1:{lab.record['port']}/api/kernels",
        data=json.dumps({"name": "python3"}).encode(),
        headers={"Authorization": f"token {lab.spec.secret}", "Content-Type": "application/json"},
        method="POST",
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30):
        pass
    kernels = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if parent_of(pid) == lab.record["pid"]]
    assert kernels, "the kernel did not start"
    # Killed outright, the server cannot shut its kernel down; delete must still stop it.
    os.kill(lab.record["pid"], signal.SIGKILL)

    driver.delete(lab.spec.session_id)

    assert not any(is_running(pid) for pid in kernels)


def test_a_server_that_dies_makes_poll_failed_with_the_reason(driver: LocalDriver) -> None:
    lab = start(driver)

    os.kill(lab.record["pid"], signal.SIGKILL)
    result = wait_for(driver, lab.spec.session_id, PollStatus.FAILED, timeout=10)

    assert str(result.reason).startswith("JupyterLab was killed by SIGKILL")
    assert lab.spec.secret not in str(result.reason)


def test_a_dead_server_is_reported_failed_by_another_process(driver: LocalDriver) -> None:
    lab = start(driver)
    script = (
        "import sys\n"
        "from labs.drivers.local import LocalDriver\n"
        "print(LocalDriver(state_dir=sys.argv[1]).poll(sys.argv[2]).status)\n"
    )

    # Not reaped by us yet, the server stays a zombie: the other process must not take it for alive.
    os.kill(lab.record["pid"], signal.SIGKILL)
    while is_running(lab.record["pid"]):
        time.sleep(0.05)
    output = subprocess.run(
        [sys.executable, "-c", script, str(driver.state.path), lab.spec.session_id],
        cwd=PROJECT_ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout

    assert output.strip() == PollStatus.FAILED


def test_shutdown_stops_every_server(driver: LocalDriver) -> None:
    one, two = make_spec(), make_spec()
    driver.create(one)
    driver.create(two)
    groups = [driver.state.read(spec.session_id)["pgid"] for spec in (one, two)]

    driver.shutdown()

    assert driver.list() == set()
    assert not any(group_exists(pgid) for pgid in groups)


def parent_of(pid: int) -> int | None:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat_line[stat_line.rindex(b")") + 2 :].split()[1])


def is_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat_line[stat_line.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")


def test_the_idle_probe_sees_a_kernel_computing_with_no_browser_attached(lab: Lab) -> None:
    """A real JupyterLab: idle at first; a kernel running a long cell is busy, and stays busy
    for the probe once the only websocket (the "browser") has gone."""
    import uuid

    import websocket

    from labs.services.activity import jupyter_activity, lab_base_url

    base, token = lab_base_url(lab.access_url), lab.spec.secret
    quiet = jupyter_activity(base, token, timeout=5)
    assert quiet.busy_now is False and quiet.last_seen is not None

    headers = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    kernel = json.loads(opener.open(urllib.request.Request(base + "api/kernels", data=b"{}", headers=headers)).read())
    try:
        socket = websocket.create_connection(
            base.replace("http://", "ws://") + f"api/kernels/{kernel['id']}/channels",
            header=[f"Authorization: token {token}"],
            timeout=30,
        )
        header = {"msg_id": uuid.uuid4().hex, "username": "t", "session": uuid.uuid4().hex, "version": "5.3"}
        content = {"code": "import time\ntime.sleep(20)", "silent": False, "store_history": False, "allow_stdin": False}
        message = {"header": {**header, "msg_type": "execute_request"}, "parent_header": {}, "metadata": {}}
        socket.send(json.dumps({**message, "content": {**content, "user_expressions": {}}, "channel": "shell", "buffers": []}))
        deadline = time.monotonic() + 30
        while not jupyter_activity(base, token, timeout=5).busy_now:
            assert time.monotonic() < deadline, "the kernel never showed busy"
            time.sleep(0.2)
        socket.close()  # the browser is gone; the cell goes on
        time.sleep(1)  # the subject: a while later, with no client, the kernel still counts as busy
        assert jupyter_activity(base, token, timeout=5).busy_now is True
    finally:
        request = urllib.request.Request(base + f"api/kernels/{kernel['id']}", headers=headers, method="DELETE")
        opener.open(request).read()
