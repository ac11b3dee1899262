"""The cluster driver contract: how the portal makes, watches and removes a lab's instance.

A driver is chosen in settings by dotted path, like Django's ``EMAIL_BACKEND``::

    LAB_DRIVER = {"BACKEND": "labs.drivers.local.LocalDriver", "OPTIONS": {...}}

and built once per process by ``labs.drivers.get_driver()``. Every method is keyed by the
session id (a UUID string), so any worker process can act on a session another one started;
a driver keeps whatever it needs to find the instance again outside process memory (pod
labels, a state directory, ...).

Contract (the suite in ``tests/drivers`` runs it against every driver):

``create(spec) -> str``
    Make the instance for ``spec.session_id`` and return its reference (the FlexNPU entity-id:
    a pod UID, a local instance id). Idempotent: called again for a session that already has
    an instance, it returns the same reference and makes nothing new. Returns as soon as the
    instance is requested; it need not be running. Raises ``DriverError`` with a message a
    student can read when the instance cannot be requested.

``poll(session_id) -> PollResult``
    ``PENDING`` while starting (``message`` says what it is waiting for), ``RUNNING`` once it
    serves requests (``access_url`` set), ``FAILED`` when it will never run or has died
    (``message`` says why), ``GONE`` when the driver has no instance for the session.
    Never raises for a missing instance.

``delete(session_id) -> None``
    Remove the instance and everything made for it; idempotent, a missing instance is not an
    error. Returns once the instance no longer uses its NPU share.

``list() -> set[str]``
    The session ids that have an instance, for the reconciler.

``shutdown() -> None``
    Called when the portal process that owns the instances stops (the local driver stops its
    processes); the default does nothing, since cluster instances outlive the portal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class DriverError(Exception):
    """The driver could not do what was asked; ``str(exc)`` is shown to the student."""


class PollStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FAILED = "failed"
    GONE = "gone"


@dataclass(frozen=True)
class PollResult:
    status: PollStatus
    message: str = ""
    access_url: str = ""


@dataclass(frozen=True)
class CardBinding:
    """Which card the ledger reserved, and the share on it."""

    node: str
    card_index: int
    die_id: str
    chip_type: str
    core_percent: int
    memory_mib: int
    scenario: str
    # The node's labels: a node pool (e.g. ``pool=research``) may use another device profile.
    node_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LaunchSpec:
    session_id: str
    kind: str  # "jupyter" | "vllm"
    image: str
    secret: str  # Jupyter token / vLLM API key; drivers must not log it
    card: CardBinding
    course_code: str = ""
    student: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    def instance_environment(self) -> dict[str, str]:
        """The instance described to the lab, as the FlexNPU device plugin would expose it."""
        return {
            "FLEXNPU_CORE_PERCENT": str(self.card.core_percent),
            "FLEXNPU_MEMORY_MIB": str(self.card.memory_mib),
            "FLEXNPU_CARD": str(self.card.card_index),
            "FLEXNPU_DIE_ID": self.card.die_id,
            "FLEXNPU_CHIP_TYPE": self.card.chip_type,
            "FLEXNPU_NODE": self.card.node,
            "FLEXNPU_SCENARIO": self.card.scenario,
            "LAB_SESSION_ID": self.session_id,
        }


class ClusterDriver:
    """Base class; see the module docstring for the contract."""

    def __init__(self, **options: object) -> None:
        if options:
            raise TypeError(f"{type(self).__name__} takes no options, got {sorted(options)}")

    def create(self, spec: LaunchSpec) -> str:
        raise NotImplementedError

    def poll(self, session_id: str) -> PollResult:
        raise NotImplementedError

    def delete(self, session_id: str) -> None:
        raise NotImplementedError

    def list(self) -> set[str]:
        raise NotImplementedError

    def shutdown(self) -> None:
        return None
