"""The simulator's start delay and injected failures."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from labs.domain.reasons import Reason
from labs.drivers import DriverError, PollStatus, build_driver
from labs.drivers.simulator import SimulatorDriver
from tests.conftest import wait_for as wait_until
from tests.drivers.helpers import make_spec, wait_for


@pytest.fixture
def state_dir(tmp_path: Path) -> str:
    return str(tmp_path / "state")


def test_poll_says_it_is_starting_with_a_reason_that_does_not_change_every_poll(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=30)
    spec = make_spec()
    driver.create(spec)

    first, second = driver.poll(spec.session_id), driver.poll(spec.session_id)

    assert first.status == PollStatus.PENDING
    # A steady reason: the controller writes a changed reason to the ledger and the pages.
    assert first.reason == second.reason == Reason.of("driver.simulated_starting")


def test_the_access_url_names_the_session_and_no_secret(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    spec = make_spec()
    driver.create(spec)

    result = driver.poll(spec.session_id)

    assert result.status == PollStatus.RUNNING
    assert result.access_url == f"https://lab.simulator.invalid/{spec.session_id}/"
    assert spec.secret not in Path(state_dir, f"{spec.session_id}.json").read_text()


def test_an_image_in_fail_images_makes_the_instance_fail(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0, fail_images=["npu-lab/broken:1"])
    spec = make_spec(image="npu-lab/broken:1")

    ref = driver.create(spec)
    result = driver.poll(spec.session_id)

    assert ref
    assert result.status == PollStatus.FAILED
    assert str(result.reason) == "image pull failed: npu-lab/broken:1 (simulated)"


def test_fail_images_may_be_a_comma_separated_string(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, fail_images="a:1, b:2")

    assert driver.fail_images == {"a:1", "b:2"}


def test_a_reject_image_makes_create_raise(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir)

    with pytest.raises(DriverError, match="refused"):
        driver.create(make_spec(image="reject:npu-lab/jupyter:1"))

    assert driver.list() == set()


def test_an_injected_failure_is_seen_by_another_driver_instance(state_dir: str) -> None:
    web = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    worker = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    spec = make_spec()
    web.create(spec)
    assert web.poll(spec.session_id).status == PollStatus.RUNNING

    worker.inject_failure(spec.session_id, "the NPU card fell off the bus (simulated)")

    result = web.poll(spec.session_id)
    assert result.status == PollStatus.FAILED
    assert str(result.reason) == "the NPU card fell off the bus (simulated)"


def test_a_foreign_pod_is_listed_on_its_node_beside_the_labs_for_every_driver_until_removed(state_dir: str) -> None:
    web = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    worker = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    spec = make_spec()
    ref = web.create(spec)

    uid = worker.foreign_pod_add(spec.card.node, "research/train-0")

    pods = web.pods_on(spec.card.node)
    assert {(p.uid, p.name, p.portal) for p in pods.values()} == {
        (ref, f"lab {spec.session_id}", True),
        (uid, "research/train-0", False),
    }
    assert web.pods_on("another-node") == {}
    assert web.list() == {spec.session_id}  # a foreign pod is no lab of the portal's
    worker.foreign_pod_remove(uid)
    assert set(web.pods_on(spec.card.node)) == {ref}


def test_injecting_a_failure_into_a_missing_instance_raises(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir)

    with pytest.raises(DriverError):
        driver.inject_failure(make_spec().session_id)


def test_a_failed_instance_can_still_be_deleted(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, fail_images=["npu-lab/broken:1"])
    spec = make_spec(image="npu-lab/broken:1")
    driver.create(spec)

    driver.delete(spec.session_id)

    assert driver.poll(spec.session_id).status == PollStatus.GONE


def test_the_simulator_runs_vllm_templates_too(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0.1)
    spec = make_spec(kind="vllm", image="vllm/vllm-openai:latest")
    driver.create(spec)

    assert wait_for(driver, spec.session_id, PollStatus.RUNNING, timeout=5).access_url


def test_build_driver_passes_the_simulator_its_options(state_dir: str) -> None:
    driver = build_driver(
        {"BACKEND": "labs.drivers.simulator.SimulatorDriver", "OPTIONS": {"state_dir": state_dir, "start_delay_seconds": 1.5}}
    )

    assert isinstance(driver, SimulatorDriver)
    assert driver.start_delay_seconds == 1.5


def test_a_negative_start_delay_is_a_configuration_error(state_dir: str) -> None:
    with pytest.raises(ValueError):
        SimulatorDriver(state_dir=state_dir, start_delay_seconds=-1)


def test_the_access_url_can_point_at_a_stand_in_lab(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0, access_url="http://127.0.0.1:8123/{session_id}/")
    spec = make_spec()
    driver.create(spec)

    assert driver.poll(spec.session_id).access_url == f"http://127.0.0.1:8123/{spec.session_id}/"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8123/lab/", "ftp://x/{session_id}/", "{session_id}"])
def test_an_access_url_without_the_session_or_not_http_is_a_configuration_error(state_dir: str, url: str) -> None:
    with pytest.raises(ValueError, match="access_url must be an http"):
        SimulatorDriver(state_dir=state_dir, access_url=url)


def test_injected_api_faults_reach_a_driver_in_another_process_until_cleared(state_dir: str) -> None:
    worker = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    harness = SimulatorDriver(state_dir=state_dir)
    kept = make_spec()
    worker.create(kept)

    harness.inject_api_faults(create_failure_rate=1.0, delete_failure_rate=1.0)

    with pytest.raises(DriverError, match="did not answer"):
        worker.create(make_spec())
    with pytest.raises(DriverError, match="did not answer"):
        worker.delete(kept.session_id)
    assert worker.list() == {kept.session_id}  # the fault file is not an instance

    harness.clear_api_faults()

    worker.create(make_spec())
    worker.delete(kept.session_id)
    assert kept.session_id not in worker.list()


def test_an_injected_create_delay_slows_creates_and_replaces_the_drivers_own(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, create_failure_rate=1.0)
    driver.inject_api_faults(create_delay_seconds=0.3)

    began = time.monotonic()
    driver.create(make_spec())  # the injected rates (0) replace the driver's own 1.0 meanwhile

    assert time.monotonic() - began >= 0.3
    driver.clear_api_faults()
    with pytest.raises(DriverError):
        driver.create(make_spec())


@pytest.mark.parametrize(
    "faults", [{"create_failure_rate": 1.5}, {"delete_failure_rate": -0.1}, {"create_delay_seconds": -1}]
)
def test_injected_api_faults_out_of_range_are_refused_and_change_nothing(state_dir: str, faults: dict) -> None:
    driver = SimulatorDriver(state_dir=state_dir)

    with pytest.raises(ValueError, match=next(iter(faults))):
        driver.inject_api_faults(**faults)

    assert driver.api_faults() == {"create_failure_rate": 0.0, "delete_failure_rate": 0.0, "create_delay_seconds": 0.0}


def _poll_until(driver: SimulatorDriver, session_id: str, done, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not done(result := driver.poll(session_id)):
        assert time.monotonic() < deadline, result
        time.sleep(0.02)
    return result


def test_with_a_restart_fraction_of_one_every_lab_restarts_once_while_starting_then_runs(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=1.0, restart_fraction=1.0)
    spec = make_spec()
    driver.create(spec)

    assert (driver.poll(spec.session_id).status, driver.poll(spec.session_id).restarts) == (PollStatus.PENDING, 0)
    restarting = _poll_until(driver, spec.session_id, lambda r: r.restarts or r.status != PollStatus.PENDING)
    up = wait_for(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED)

    assert (restarting.status, restarting.restarts) == (PollStatus.PENDING, 1)
    assert str(restarting.last_exit) == "Error, exit code 1"
    assert (up.status, up.restarts, str(up.last_exit)) == (PollStatus.RUNNING, 1, "Error, exit code 1")


def test_without_a_restart_fraction_no_lab_restarts(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    specs = [make_spec() for _ in range(20)]
    for spec in specs:
        driver.create(spec)

    assert {(o.status, o.restarts, o.last_exit) for o in driver.observe().values()} == {(PollStatus.RUNNING, 0, None)}


def test_an_injected_restart_is_seen_by_another_driver_instance_and_the_lab_comes_back(state_dir: str) -> None:
    web = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0.5)
    worker = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0.5)
    spec = make_spec()
    web.create(spec)
    wait_for(web, spec.session_id, PollStatus.RUNNING)

    worker.inject_restart(spec.session_id)

    down = web.poll(spec.session_id)
    assert (down.status, down.restarts, str(down.last_exit)) == (PollStatus.PENDING, 1, "OOMKilled, exit code 137")
    up = wait_for(web, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED)
    assert (up.status, up.restarts) == (PollStatus.RUNNING, 1)
    worker.inject_restart(spec.session_id, reason="Error", exit_code=2)
    assert (web.poll(spec.session_id).restarts, str(web.poll(spec.session_id).last_exit)) == (2, "Error, exit code 2")


def test_injecting_a_restart_into_a_missing_instance_raises(state_dir: str) -> None:
    with pytest.raises(DriverError):
        SimulatorDriver(state_dir=state_dir).inject_restart(make_spec().session_id)


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_a_restart_fraction_outside_zero_to_one_is_a_configuration_error(state_dir: str, fraction: float) -> None:
    with pytest.raises(ValueError, match="restart_fraction must be between 0 and 1"):
        SimulatorDriver(state_dir=state_dir, restart_fraction=fraction)


def test_a_restarted_node_has_a_new_boot_its_labs_fail_until_its_npus_are_back_then_run(state_dir: str) -> None:
    web = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0.2)
    worker = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0.2)
    spec = make_spec()
    web.create(spec)
    wait_for(web, spec.session_id, PollStatus.RUNNING)
    before = web.nodes()[spec.card.node]
    assert before.boot_id and before.npus_reported

    worker.inject_reboot(spec.card.node, devices_after_seconds=0.5, comes_back=True)

    after = web.nodes()[spec.card.node]
    assert after.boot_id not in ("", before.boot_id) and not after.npus_reported
    down = web.poll(spec.session_id)
    assert down.status == PollStatus.FAILED and "UnexpectedAdmissionError" in str(down.reason)
    up = wait_for(web, spec.session_id, PollStatus.RUNNING)
    assert up.restarts == 1 and web.nodes()[spec.card.node] == type(after)(after.boot_id, npus_reported=True)


def test_labs_on_a_restarted_node_that_do_not_come_back_stay_failed_and_new_ones_run(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir, start_delay_seconds=0)
    old = make_spec()
    driver.create(old)

    driver.inject_reboot(old.card.node, devices_after_seconds=0, comes_back=False)
    wait_until(lambda: driver.nodes()[old.card.node].npus_reported, timeout=5, message="the NPUs reported again")

    assert driver.poll(old.session_id).status == PollStatus.FAILED
    driver.delete(old.session_id)
    driver.create(old)
    assert driver.poll(old.session_id).status == PollStatus.RUNNING


def test_npus_that_never_come_back_are_never_reported(state_dir: str) -> None:
    driver = SimulatorDriver(state_dir=state_dir)
    driver.inject_reboot("n9", devices_after_seconds=None)

    assert driver.nodes()["n9"].npus_reported is False
