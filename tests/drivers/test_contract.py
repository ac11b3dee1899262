"""The driver contract (see ``labs.drivers.base``), run against every driver."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from labs.domain.reasons import Reason
from labs.drivers import ClusterDriver, DriverError, LaunchSpec, NodeBoot, PollStatus, build_driver
from tests.drivers.helpers import make_spec, wait_for, wait_gone

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SpecFactory = Callable[..., LaunchSpec]
# Each backend with its own options (build_driver refuses another backend's).
BACKENDS = {
    "simulator": ("labs.drivers.simulator.SimulatorDriver", {"start_delay_seconds": 0.2}),
    "local": ("labs.drivers.local.LocalDriver", {"host": "127.0.0.1"}),
}


@pytest.fixture(params=sorted(BACKENDS))
def config(request: pytest.FixtureRequest, tmp_path: Path) -> dict:
    backend, options = BACKENDS[request.param]
    return {"BACKEND": backend, "OPTIONS": {"state_dir": str(tmp_path / "state"), **options}}


@pytest.fixture
def new_spec() -> SpecFactory:
    """Makes the launch specs of the tests; a driver's variant may place them (its nodes, its course)."""
    return make_spec


@pytest.fixture
def driver(config: dict) -> Iterator[ClusterDriver]:
    driver = build_driver(config)
    yield driver
    driver.shutdown()
    for session_id in driver.list():
        driver.delete(session_id)


def test_create_returns_a_ref_and_poll_reaches_running_with_an_access_url(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    spec = new_spec()

    ref = driver.create(spec)
    result = wait_for(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED)

    assert ref
    assert result.status == PollStatus.RUNNING, result.reason
    assert result.access_url.startswith(("http://", "https://"))


def test_poll_is_pending_with_a_reason_the_portal_can_translate_right_after_create(
    driver: ClusterDriver, new_spec: SpecFactory
) -> None:
    spec = new_spec()
    driver.create(spec)

    result = driver.poll(spec.session_id)

    assert result.status == PollStatus.PENDING
    # A code of the reason registry, put into the reader's words by the portal, not a sentence.
    assert isinstance(result.reason, Reason) and result.reason.code.startswith("driver.")
    assert str(result.reason)
    assert not result.access_url


def test_create_twice_returns_the_same_ref_and_makes_one_instance(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    spec = new_spec()

    first = driver.create(spec)
    second = driver.create(spec)

    assert first == second
    assert driver.list() == {spec.session_id}


def test_each_session_gets_its_own_instance(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    one, two = new_spec(), new_spec()

    assert driver.create(one) != driver.create(two)
    assert driver.list() == {one.session_id, two.session_id}


def test_delete_makes_the_session_gone(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    spec = new_spec()
    driver.create(spec)

    driver.delete(spec.session_id)
    wait_gone(driver, spec.session_id)

    assert driver.poll(spec.session_id).status == PollStatus.GONE
    assert driver.list() == set()


def test_delete_twice_is_fine(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    spec = new_spec()
    driver.create(spec)

    driver.delete(spec.session_id)
    driver.delete(spec.session_id)
    wait_gone(driver, spec.session_id)

    assert driver.poll(spec.session_id).status == PollStatus.GONE


def test_poll_of_an_unknown_session_is_gone(driver: ClusterDriver) -> None:
    assert driver.poll(str(uuid.uuid4())).status == PollStatus.GONE


def test_delete_of_an_unknown_session_is_fine(driver: ClusterDriver) -> None:
    driver.delete(str(uuid.uuid4()))

    assert driver.list() == set()


@pytest.mark.parametrize("session_id", ["../../etc/passwd", "not-a-uuid", ""])
def test_an_invalid_session_id_is_refused(driver: ClusterDriver, session_id: str, new_spec: SpecFactory) -> None:
    with pytest.raises(DriverError):
        driver.create(new_spec(session_id=session_id or "x"))
    with pytest.raises(DriverError):
        driver.poll(session_id)
    with pytest.raises(DriverError):
        driver.delete(session_id)


def test_another_process_sees_and_deletes_the_instance(driver: ClusterDriver, config: dict, new_spec: SpecFactory) -> None:
    spec = new_spec()
    driver.create(spec)
    script = (
        "import json, sys\n"
        "from labs.drivers import build_driver\n"
        "driver = build_driver(json.loads(sys.argv[1]))\n"
        "assert driver.list() == {sys.argv[2]}, driver.list()\n"
        "driver.delete(sys.argv[2])\n"
    )

    subprocess.run([sys.executable, "-c", script, json.dumps(config), spec.session_id], cwd=PROJECT_ROOT, check=True, timeout=60)
    wait_gone(driver, spec.session_id)

    assert driver.poll(spec.session_id).status == PollStatus.GONE
    assert driver.list() == set()


def test_observe_reports_every_instance_with_its_reference_and_node(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    one, two = new_spec(), new_spec()
    refs = {one.session_id: driver.create(one), two.session_id: driver.create(two)}

    observed = driver.observe()

    assert set(observed) == set(refs)
    for session_id, seen in observed.items():
        assert seen.session_id == session_id
        assert seen.ref == refs[session_id]
        assert seen.node == one.card.node
        assert seen.status in (PollStatus.PENDING, PollStatus.RUNNING)
        assert not seen.deleting


def test_observe_of_a_deleted_instance_no_longer_lists_it(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    kept, gone = new_spec(), new_spec()
    driver.create(kept)
    driver.create(gone)

    driver.delete(gone.session_id)
    wait_gone(driver, gone.session_id)

    assert set(driver.observe()) == {kept.session_id}


def test_observe_with_no_instances_is_empty(driver: ClusterDriver) -> None:
    assert driver.observe() == {}


def test_pods_on_lists_an_instance_by_its_ref_on_its_node_only(driver: ClusterDriver, new_spec: SpecFactory) -> None:
    spec = new_spec()
    ref = driver.create(spec)
    # Running: on Kubernetes a pod is on a node once it is scheduled there.
    wait_for(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED)

    pods = driver.pods_on(spec.card.node)

    assert pods[ref].uid == ref and pods[ref].portal
    assert ref not in driver.pods_on("another-node")
    driver.delete(spec.session_id)
    wait_gone(driver, spec.session_id)
    assert ref not in driver.pods_on(spec.card.node)


def test_nodes_reports_the_node_of_a_running_lab_with_a_steady_boot_and_its_npus(
    driver: ClusterDriver, new_spec: SpecFactory
) -> None:
    spec = new_spec()
    driver.create(spec)
    wait_for(driver, spec.session_id, PollStatus.RUNNING, PollStatus.FAILED)

    first, second = driver.nodes(), driver.nodes()

    assert first == second  # a boot id changes only when the node restarts
    assert all(isinstance(boot, NodeBoot) for boot in first.values())
    if first:  # a driver that sees nodes (the local one does not)
        assert first[spec.card.node].boot_id and first[spec.card.node].npus_reported
