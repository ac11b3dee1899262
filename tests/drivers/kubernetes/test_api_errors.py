"""API failures: transient ones are retried with backoff, the rest become a readable DriverError.

Failures are injected into kmock's emulator with reactions that answer an error (or hang)
and then step aside, so later requests reach the emulator's normal handling.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import kmock
import pytest

from labs.drivers import DriverError, PollStatus, build_driver
from labs.drivers.kubernetes import KubernetesDriver
from tests.drivers.helpers import make_spec
from tests.drivers.kubernetes.conftest import driver_config
from tests.drivers.kubernetes.emulator import EmulatorThread

LIST_PODS = "get /api/v1/pods"
CREATE_PODS = "post /api/v1/namespaces/lab-npu101/pods"


class Failing:
    """Answer ``status`` to the first ``times`` matching requests, then let the emulator handle them."""

    def __init__(self, times: int, status: int = 500, message: str = "etcdserver: request timed out") -> None:
        self.times, self.status, self.message = times, status, message
        self.calls = 0

    def __call__(self, request: kmock.Request) -> None:
        self.calls += 1
        if self.calls <= self.times:
            raise kmock.KubernetesError(status=self.status, reason="InternalError", message=self.message)
        raise NotImplementedError  # kmock: no reaction here, fall through to the emulator


class Hanging:
    """Hold the first ``times`` matching requests longer than the client waits, then step aside."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.calls = 0

    async def __call__(self, request: kmock.Request) -> None:
        self.calls += 1
        if self.calls <= self.times:
            await asyncio.sleep(3)
        raise NotImplementedError


def driver_for(emulator: EmulatorThread, **options: object) -> KubernetesDriver:
    driver = build_driver(driver_config(emulator.url, **options))
    assert isinstance(driver, KubernetesDriver)
    return driver


def test_a_500_is_retried_and_the_call_then_succeeds(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=2)
    spec = make_spec()
    driver.create(spec)
    failing = Failing(times=2)
    emulator.react(LIST_PODS, failing)

    assert driver.poll(spec.session_id).status == PollStatus.PENDING
    assert failing.calls == 3


def test_a_lasting_500_becomes_a_driver_error_after_the_retries(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=2)
    failing = Failing(times=100)
    emulator.react(LIST_PODS, failing)

    with pytest.raises(DriverError, match=r"^The cluster refused listing lab pods: 500 .*etcdserver: request timed out\.$"):
        driver.list()
    assert failing.calls == 3


def test_a_client_error_is_not_retried(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=2)
    failing = Failing(times=100, status=403, message='pods is forbidden: User "portal" cannot list resource "pods"')
    emulator.react(LIST_PODS, failing)

    with pytest.raises(DriverError, match="403 .*pods is forbidden"):
        driver.list()
    assert failing.calls == 1


def test_a_create_whose_answer_was_lost_is_looked_for_not_sent_again(emulator: EmulatorThread) -> None:
    # The emulator, like an API server, has stored the pod before the 500 goes out. A second
    # create would be charged to the namespace's ResourceQuota again: the driver reads instead.
    driver = driver_for(emulator, retries=2)
    failing = Failing(times=1)
    emulator.react(CREATE_PODS, failing)

    uid = driver.create(make_spec())

    (pod,) = emulator.objects("pods")
    assert uid == pod["metadata"]["uid"]
    assert failing.calls == 1
    assert len(emulator.kmock[CREATE_PODS]) == 1


def test_a_create_refused_by_priority_and_fairness_is_sent_again(emulator: EmulatorThread) -> None:
    # 429: the API server turned the request away before doing anything with it.
    driver = driver_for(emulator, retries=2)
    failing = Failing(times=1, status=429, message="Too many requests, please try again later.")
    emulator.react(CREATE_PODS, failing)

    uid = driver.create(make_spec())

    (pod,) = emulator.objects("pods")
    assert uid == pod["metadata"]["uid"]
    assert len(emulator.kmock[CREATE_PODS]) == 2


def test_a_create_that_times_out_is_not_sent_again(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=2, request_timeout_seconds=0.5)
    hanging = Hanging(times=1)  # the emulator has the pod; its answer comes after the client gave up
    emulator.react(CREATE_PODS, hanging)

    uid = driver.create(make_spec())

    (pod,) = emulator.objects("pods")
    assert uid == pod["metadata"]["uid"]
    assert hanging.calls == 1
    assert len(emulator.kmock[CREATE_PODS]) == 1


def test_a_repeated_create_reads_the_pod_and_sends_no_create(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=2)
    spec = make_spec()
    uid = driver.create(spec)

    assert driver.create(replace(spec, repeat=True)) == uid
    assert len(emulator.kmock[CREATE_PODS]) == 1


def test_a_repeated_create_of_a_pod_not_there_creates_it(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=2)

    uid = driver.create(replace(make_spec(), repeat=True))

    (pod,) = emulator.objects("pods")
    assert uid == pod["metadata"]["uid"]
    assert len(emulator.kmock[CREATE_PODS]) == 1


def test_a_request_that_times_out_is_retried(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=2, request_timeout_seconds=0.5)
    spec = make_spec()
    driver.create(spec)
    hanging = Hanging(times=1)
    emulator.react(LIST_PODS, hanging)

    assert driver.poll(spec.session_id).status == PollStatus.PENDING
    assert hanging.calls == 2


def test_an_api_that_keeps_hanging_becomes_a_driver_error(emulator: EmulatorThread) -> None:
    driver = driver_for(emulator, retries=1, request_timeout_seconds=0.5)
    hanging = Hanging(times=100)
    emulator.react(LIST_PODS, hanging)

    with pytest.raises(DriverError, match="^The cluster API did not answer while listing lab pods; try again shortly.$"):
        driver.list()
    assert hanging.calls == 2


def test_an_unreachable_api_becomes_a_driver_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    driver = build_driver(driver_config(f"http://127.0.0.1:{port}", retries=1))

    with pytest.raises(DriverError, match="did not answer"):
        driver.poll(make_spec().session_id)
