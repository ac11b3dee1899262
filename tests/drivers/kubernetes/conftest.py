"""Fixtures for the Kubernetes driver tests: kmock's API emulator on a local port, a driver aimed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from labs.drivers import build_driver
from labs.drivers.kubernetes import KubernetesDriver
from tests.drivers.kubernetes.emulator import EmulatorThread, Kubelet

BACKEND = "labs.drivers.kubernetes.KubernetesDriver"


@pytest.fixture
def emulator() -> Iterator[EmulatorThread]:
    server = EmulatorThread().start()
    yield server
    server.stop()


@pytest.fixture
def kubelet(emulator: EmulatorThread) -> Iterator[Kubelet]:
    kubelet = Kubelet(emulator.url)
    yield kubelet
    kubelet.stop()


def driver_config(url: str, **options: object) -> dict:
    # kmock 0.8 cannot serve /api/v1/namespaces (its URL parser fails on it), so the course
    # namespace is taken as existing, as it is when deploy/ makes course namespaces.
    base = {
        "api_url": url,
        "token": "test-token",
        "manage_namespaces": False,
        "url_pattern": "https://labs.example.edu/labs/{session_id}/",
        "request_timeout_seconds": 2,
        "retries": 2,
        "delete_wait_seconds": 5,
    }
    return {"BACKEND": BACKEND, "OPTIONS": {**base, **options}}


@pytest.fixture
def k8s_driver(emulator: EmulatorThread) -> KubernetesDriver:
    driver = build_driver(driver_config(emulator.url))
    assert isinstance(driver, KubernetesDriver)
    return driver
