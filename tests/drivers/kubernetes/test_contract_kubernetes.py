"""The shared driver contract (``tests/drivers/test_contract.py``) run against KubernetesDriver.

The contract's tests are imported here so they run with this module's ``config`` and
``driver`` fixtures: the driver talks over HTTP to kmock's emulator, and a stand-in kubelet
starts each pod a second after it appears.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from labs.drivers import ClusterDriver, build_driver
from tests.drivers.kubernetes.conftest import driver_config
from tests.drivers.kubernetes.emulator import EmulatorThread, Kubelet
from tests.drivers.test_contract import (  # noqa: F401 - collected here with this module's fixtures
    new_spec,
    test_an_invalid_session_id_is_refused,
    test_another_process_sees_and_deletes_the_instance,
    test_create_returns_a_ref_and_poll_reaches_running_with_an_access_url,
    test_create_twice_returns_the_same_ref_and_makes_one_instance,
    test_delete_makes_the_session_gone,
    test_delete_of_an_unknown_session_is_fine,
    test_delete_twice_is_fine,
    test_each_session_gets_its_own_instance,
    test_observe_of_a_deleted_instance_no_longer_lists_it,
    test_observe_reports_every_instance_with_its_reference_and_node,
    test_observe_with_no_instances_is_empty,
    test_poll_is_pending_with_a_reason_the_portal_can_translate_right_after_create,
    test_poll_of_an_unknown_session_is_gone,
)


@pytest.fixture
def config(emulator: EmulatorThread, kubelet: Kubelet) -> dict:
    kubelet.start_in_background(after_seconds=1.0)
    return driver_config(emulator.url)


@pytest.fixture
def driver(config: dict) -> Iterator[ClusterDriver]:
    driver = build_driver(config)
    yield driver
    driver.shutdown()
    for session_id in driver.list():
        driver.delete(session_id)
