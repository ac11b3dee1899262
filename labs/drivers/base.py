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
    instance is requested; it need not be running. Raises ``DriverRefused`` when asking again
    cannot help (an image the cluster rejects, a template the driver cannot run) and
    ``DriverError`` for anything that may pass (the API did not answer, a conflict); the
    message is one a student can read.

``observe() -> dict[str, Observed]``
    Every instance the driver knows, by session id, in one call: its phase (``PENDING`` while
    starting, ``RUNNING`` once it serves requests, ``FAILED`` when it will never run or died),
    the reason for it (how far a start got, why it failed), the access URL, its reference, the
    node and, where the platform says so, the card it really runs on; ``deleting`` once its
    removal has been requested; ``restarts``, how many times the lab ended and the platform
    started it again (or is about to: a container waiting to be restarted counts), with
    ``last_exit``, why it ended the last time (a driver whose labs are never restarted reports
    0 and ``None``). A restarting lab is ``PENDING`` until it serves again, never ``FAILED``
    for the restart: how many restarts a start may take is the controller's decision
    (``LAB_START_RESTARTS``), and a running lab that restarted stays running. The reason is a
    ``labs.domain.reasons.Reason`` with a ``driver.*`` code, never a sentence: the portal puts it
    into each reader's language. What only the platform can say (a scheduler's or a container's
    own words) goes in as a parameter, as it is; where there is nothing but such words,
    ``session.driver``. An instance that is not in the result does not exist. Raises
    ``DriverError`` when the cluster cannot be read at all: then nothing may be concluded from
    absence.

``delete(session_id) -> None``
    Ask for the instance and everything made for it to be removed, and return without waiting;
    idempotent, a missing instance is not an error. The NPU share is free once ``observe()``
    no longer lists the instance.

``pods_on(node) -> dict[str, NodePod]``
    Every pod bound to ``node`` now, whoever made it (the portal's labs and anyone else's: a
    researcher's job on the same server), by UID. FlexNPU names each instance by its pod's UID
    (the entity-id), and the CCE guide calls an instance residual when "存在entity-id但不存在Pod的UID"
    (its entity-id exists but no pod of that UID does): this is the list the node reconciler
    compares the agent's entity-ids against. A pod being deleted is still listed until it is
    gone. Raises ``DriverError`` when the pods cannot be read: then nothing may be concluded
    from absence.

``nodes() -> dict[str, NodeBoot]``
    Every node the platform reports, by name: its boot id (Kubernetes: ``status.nodeInfo.bootID``;
    empty when not reported) and whether its NPUs are reported now (the device plugin's extended
    resources advertised with a non-zero amount). A new boot id means the node restarted; the CCE
    FlexNPU guide says its NPU pods may then show failed until the NPUs are reported again.
    ``{}`` from a driver that cannot see nodes (the default). Raises ``DriverError`` when they
    cannot be read.

``node_status(node) -> NodeStatus | None``
    The cluster's node called ``node`` as its device plugin and the vNPU installation left it:
    the device profile the driver uses there, the node's labels and the profile's extended
    resources with their allocatable amounts (0 for one not advertised), the cards' die ids and
    chip types where its device plugin registers them on the node; ``exists`` false when the
    cluster has no such node. ``None`` from a driver without node objects (local,
    simulator, unless a test gives it one): then only the agent's facts decide readiness
    (``labs.domain.readiness``). Raises ``DriverError`` when the node cannot be read: then
    nothing may be concluded.

``shutdown() -> None``
    Called when the portal process that owns the instances stops (the local driver stops its
    processes); the default does nothing, since cluster instances outlive the portal.

``poll(session_id)`` and ``list()`` are conveniences derived from ``observe()``; the lifecycle
controller (``labs.services.controller``) uses ``observe()`` only, once per period, never one
call per session.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from labs.domain.reasons import Reason
from labs.domain.units import HOST_DEFAULTS


class DriverError(Exception):
    """The driver could not do what was asked; ``str(exc)`` is shown to the student. Asking again may work."""


class DriverRefused(DriverError):
    """The driver will never do what was asked as it stands (a rejected image, an unsupported kind)."""


class PollStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FAILED = "failed"
    GONE = "gone"


@dataclass(frozen=True)
class PollResult:
    status: PollStatus
    reason: Reason | None = None
    access_url: str = ""
    restarts: int = 0  # see ``Observed``
    last_exit: Reason | None = None


@dataclass(frozen=True)
class Observed:
    """One instance as the driver sees it now (see ``observe`` in the module docstring)."""

    session_id: str
    status: PollStatus
    ref: str = ""
    reason: Reason | None = None  # how far a start got, why it failed (see ``observe``)
    access_url: str = ""
    node: str = ""
    # The card the platform reports the instance on; ``None`` where it does not say.
    card_index: int | None = None
    deleting: bool = False
    # Times the lab ended and was (or is about to be) started again, and why it ended the last
    # time, e.g. "OOMKilled, exit code 137" (see ``observe``).
    restarts: int = 0
    last_exit: Reason | None = None

    def as_poll_result(self) -> PollResult:
        return PollResult(
            self.status, reason=self.reason, access_url=self.access_url, restarts=self.restarts, last_exit=self.last_exit
        )


@dataclass(frozen=True)
class NodePod:
    """One pod on a node, as ``pods_on`` lists it: its UID (an entity-id, once FlexNPU registers
    its instance), a name an operator can find it by (``namespace/name`` on Kubernetes) and
    whether it is one of the portal's own labs."""

    uid: str
    name: str
    portal: bool


@dataclass(frozen=True)
class NodeBoot:
    """One node as ``nodes`` reports it: its boot id (empty: not reported) and whether its NPUs are reported now."""

    boot_id: str
    npus_reported: bool


@dataclass(frozen=True)
class NodeStatus:
    """One node as ``node_status`` reads it (see the module docstring)."""

    profile: str
    labels: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, int] = field(default_factory=dict)
    exists: bool = True
    # Each card's (die id, chip type as the ledger names it), by card index, as the device plugin
    # registered them on the node (openFuyao's ``huawei.com/node-vnpu-register``); empty when
    # the node carries no such list.
    devices: tuple[tuple[str, str], ...] = ()


def launches_vllm_serve(command: Sequence[str]) -> bool:
    """A vLLM lab's command is empty (the driver's ``vllm serve``) or starts ``vllm serve``.

    The pod passes the model as the first argument, which only ``vllm serve MODEL`` reads:
    ``python -m vllm.entrypoints.openai.api_server`` ignores it and silently serves its default model.
    """
    return not command or list(command[:2]) == ["vllm", "serve"]


@dataclass(frozen=True)
class CardBinding:
    """Which card the ledger reserved, and the share on it.

    ``cards`` > 1: that many whole cards on ``node`` from ``card_index`` on (the ledger's first);
    ``core_percent`` is then 100 x cards and ``memory_mib`` the whole memory of all of them.
    """

    node: str
    card_index: int
    die_id: str
    chip_type: str
    core_percent: int
    memory_mib: int
    scenario: str
    # The whole card's memory (the ledger's ``Card.memory_mib``): vLLM's memory fraction is of it
    # when the device runtime reports the whole card. 0: unknown, and a vLLM pod is refused.
    card_memory_mib: int = 0
    # The node's labels: a node pool (e.g. ``pool=research``) may use another device profile.
    node_labels: tuple[tuple[str, str], ...] = ()
    cards: int = 1
    # "elastic" (a floor: ``core_percent`` 1..100) or "best-effort" (no floor: ``core_percent`` 0).
    share_policy: str = "elastic"


@dataclass(frozen=True)
class HostResources:
    """Host CPU (millicores), memory and scratch disk (MiB) of the instance: requests are what the
    node keeps for it (placement counts them), limits what it may reach. Defaults: a teaching
    JupyterLab (``labs.models.catalog.HOST_DEFAULTS``)."""

    cpu_request_millicores: int = 500
    cpu_limit_millicores: int = 2000
    memory_request_mib: int = 2048
    memory_limit_mib: int = 4096
    ephemeral_storage_mib: int = 10240

    @classmethod
    def for_kind(cls, kind: str) -> HostResources:
        """The defaults of a template ``kind`` (``labs.domain.units.HOST_DEFAULTS``)."""
        d = HOST_DEFAULTS.get(kind, HOST_DEFAULTS["jupyter"])
        return cls(
            d["cpu_request_millicores"],
            d["cpu_limit_millicores"],
            d["host_memory_request_mib"],
            d["host_memory_limit_mib"],
            d["ephemeral_storage_mib"],
        )

    def __post_init__(self) -> None:
        for name in (
            "cpu_request_millicores",
            "cpu_limit_millicores",
            "memory_request_mib",
            "memory_limit_mib",
            "ephemeral_storage_mib",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"HostResources.{name} must be a positive integer, not {value!r}")
        if self.cpu_limit_millicores < self.cpu_request_millicores:
            raise ValueError("HostResources: the CPU limit is below the request")
        if self.memory_limit_mib < self.memory_request_mib:
            raise ValueError("HostResources: the memory limit is below the request")


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
    model: str = ""  # vLLM: the model to serve; empty: the driver's default
    host: HostResources = HostResources()
    # A create of this instance may have been asked before (its lease ended, or it failed): a
    # driver whose repeated create costs something (a Kubernetes namespace's ResourceQuota
    # charges every create) looks for the instance first.
    repeat: bool = False

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
            # Whole cards: how many (FLEXNPU_CARD is the first).
            **({"FLEXNPU_CARDS": str(self.card.cards)} if self.card.cards > 1 else {}),
        }


def canonical_session_id(session_id: object) -> str:
    """``session_id`` in canonical UUID form; ``DriverError`` when it is not a UUID (never a path or a selector)."""
    if isinstance(session_id, uuid.UUID):
        return str(session_id)
    if not isinstance(session_id, str):
        raise DriverError(f"Not a session id: {session_id!r}.")
    try:
        return str(uuid.UUID(session_id))
    except ValueError:
        raise DriverError(f"Not a session id: {session_id!r}.") from None


class ClusterDriver:
    """Base class; see the module docstring for the contract."""

    def __init__(self, **options: object) -> None:
        if options:
            raise TypeError(f"{type(self).__name__} takes no options, got {sorted(options)}")

    def create(self, spec: LaunchSpec) -> str:
        raise NotImplementedError

    def observe(self) -> dict[str, Observed]:
        raise NotImplementedError

    def delete(self, session_id: str) -> None:
        raise NotImplementedError

    def pods_on(self, node: str) -> dict[str, NodePod]:
        raise NotImplementedError

    def nodes(self) -> dict[str, NodeBoot]:
        return {}

    def node_status(self, node: str) -> NodeStatus | None:
        """The cluster's node; ``None``: this driver has no node objects (module docstring)."""
        return None

    def best_effort_nodes(self) -> dict[str, str] | None:
        """The node labels (all of them) of the nodes that run best-effort instances (no AI Core
        floor: cores 0, memory only); ``{}``: every node; ``None``: none, and a best-effort
        template is refused. Only openFuyao vNPU in soft mode has them; FlexNPU and the local
        and simulated instances always have a floor."""
        return None

    def device_profile(self, labels: Mapping[str, str]) -> str:
        """The device profile (``flexnpu``, ``vnpu``, ``hami``) of a node with ``labels``: the
        node's preconditions (``labs.domain.readiness``) are that profile's. The local and
        simulated instances stand for FlexNPU ones."""
        return "flexnpu"

    def card_truth(self, labels: Mapping[str, str], *, die_ids_known: bool) -> str:
        """How the portal learns which card an instance on a node with ``labels`` really got.

        ``"reported"`` (the node's agent lists each instance on its card: here the portal
        registers it there itself), ``"pinned"`` (the instance is made on the ledger's card) or
        ``"none"`` (neither: the ledger keeps such a node at node granularity). ``die_ids_known``:
        whether the node's agent reports every card's die id.
        """
        return "reported"

    def memory_seen(self, labels: Mapping[str, str]) -> str:
        """What the NPU memory query reports inside an instance on a node with ``labels``:
        ``"cap"`` (the share's cap, as a soft-partitioning runtime or a simulated instance shows)
        or ``"card"`` (the whole card; the plugin only enforces the cap). The isolation self-test
        judges the visible memory against the cap only where it is ``"cap"``."""
        return "cap"

    def simulated_selftest_mib(self, session_id: str) -> int | None:
        """The NPU memory a simulated instance's isolation self-test sees, in MiB; ``None`` for a
        driver whose labs run the real self-test themselves (every driver but the simulator)."""
        return None

    def poll(self, session_id: str) -> PollResult:
        """The one session's instance from ``observe()``; ``GONE`` when there is none."""
        observed = self.observe().get(canonical_session_id(session_id))
        return observed.as_poll_result() if observed is not None else PollResult(PollStatus.GONE)

    def list(self) -> set[str]:
        """The session ids that have an instance."""
        return set(self.observe())

    def shutdown(self) -> None:
        return None
