"""Helpers for the driver tests: a launch spec factory and a poll loop."""

from __future__ import annotations

import time
import uuid

import pytest

from labs.drivers.base import CardBinding, ClusterDriver, LaunchSpec, PollResult, PollStatus

CARD = CardBinding(
    node="node-a",
    card_index=3,
    die_id="die-3a",
    chip_type="910B",
    core_percent=25,
    memory_mib=8192,
    scenario="training",
    card_memory_mib=65536,
)


def make_spec(*, kind: str = "jupyter", image: str = "npu-lab/jupyter:1", session_id: str | None = None) -> LaunchSpec:
    return LaunchSpec(
        session_id=session_id or str(uuid.uuid4()),
        kind=kind,
        image=image,
        secret=f"tok-{uuid.uuid4().hex}",
        card=CARD,
        course_code="NPU101",
        student="ada",
    )


def wait_for(driver: ClusterDriver, session_id: str, *statuses: PollStatus, timeout: float = 60.0) -> PollResult:
    """Poll until the status is one of ``statuses``; fail the test with the last result on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = driver.poll(session_id)
        if result.status in statuses:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(f"session {session_id} still {result} after {timeout} s, wanted {statuses}")
        time.sleep(0.2)


def wait_gone(driver: ClusterDriver, session_id: str, timeout: float = 30.0) -> None:
    """Until ``observe()`` no longer lists the session; until then it must say the instance is being deleted.

    ``delete`` returns without waiting: on Kubernetes a pod bound to a node stays, marked for
    deletion, until its kubelet has stopped it.
    """
    deadline = time.monotonic() + timeout
    while (seen := driver.observe().get(session_id)) is not None:
        assert seen.deleting, f"session {session_id} still listed after delete and not marked deleting: {seen}"
        if time.monotonic() >= deadline:
            pytest.fail(f"session {session_id} still listed {timeout} s after delete: {seen}")
        time.sleep(0.1)
