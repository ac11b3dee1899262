"""The shared driver contract (``tests/drivers/test_contract.py``) against the real control plane, per device profile.

The driver is the portal's: a token of deploy/base's ServiceAccount (so the shipped RBAC), a
course namespace made by ``course_manifests`` under a prefix of its own per test, and launch
specs on the node of the profile, which the node simulator starts after its delay.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from labs.devcluster.cluster import DevCluster
from labs.devcluster.portal import portal_token
from labs.drivers import ClusterDriver, build_driver
from tests.drivers.test_contract import (  # noqa: F401 - collected here with this module's fixtures
    SpecFactory,
    test_an_invalid_session_id_is_refused,
    test_another_process_sees_and_deletes_the_instance,
    test_create_returns_a_ref_and_poll_reaches_running_with_an_access_url,
    test_create_twice_returns_the_same_ref_and_makes_one_instance,
    test_delete_makes_the_session_gone,
    test_delete_of_an_unknown_session_is_fine,
    test_delete_twice_is_fine,
    test_each_session_gets_its_own_instance,
    test_nodes_reports_the_node_of_a_running_lab_with_a_steady_boot_and_its_npus,
    test_observe_of_a_deleted_instance_no_longer_lists_it,
    test_observe_reports_every_instance_with_its_reference_and_node,
    test_observe_with_no_instances_is_empty,
    test_pods_on_lists_an_instance_by_its_ref_on_its_node_only,
    test_poll_is_pending_with_a_reason_the_portal_can_translate_right_after_create,
    test_poll_of_an_unknown_session_is_gone,
)
from tests.kube.conftest import LabCourse, lab_spec, portal_driver_config

pytestmark = pytest.mark.kube


@pytest.fixture
def config(deployed: DevCluster, core: client.CoreV1Api, lab_course: LabCourse) -> dict[str, Any]:
    return portal_driver_config(deployed, portal_token(core), namespace_prefix=lab_course.prefix, profile=lab_course.profile)


@pytest.fixture
def new_spec(lab_course: LabCourse) -> SpecFactory:
    return partial(lab_spec, lab_course)


@pytest.fixture
def driver(config: dict[str, Any]) -> Iterator[ClusterDriver]:
    driver = build_driver(config)
    yield driver
    driver.shutdown()
    for session_id in driver.list():
        driver.delete(session_id)
