"""The driver's creates and deletes, made side by side on a small pool, and the instances they make
recorded (bound) on the ledger; what a create asks for (``launch_spec``)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from functools import lru_cache
from urllib.parse import urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from labs import dispatch
from labs.domain.lifecycle import Create, Desired
from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.drivers import LaunchSpec, get_driver
from labs.drivers.base import CardBinding, HostResources
from labs.models import Allocation, Card, LabSession, Node, RepairEvent
from labs.services.agents import InstanceCall
from labs.services.locks import allocation_lock
from labs.services.rows import rows_update
from labs.services.sessions import sessions_transition

logger = logging.getLogger(__name__)


# Creates a process has out at once per pool thread while it knows nothing of the cluster's pace
# (a create is four requests on Kubernetes); once calls are timed, what the pool clears in a
# third of a lease, counting a call at MIN_CALL_SECONDS at least, and MOST_OUT at most.
CREATES_OUT_PER_THREAD = 4
MIN_CALL_SECONDS = 0.002
MOST_OUT = 2048


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    # Driver calls are network or process waits: a few threads overlap them. Made lazily, in
    # the process that uses it (Celery forks its workers after import).
    return ThreadPoolExecutor(max_workers=settings.LAB_CONTROLLER_THREADS, thread_name_prefix="controller")


class _DriverCalls:
    """The driver calls this process has queued or is making, by session: what Kubernetes'
    controllers call expectations. A round asks nothing of a session with a call out, so a
    class larger than the pool clears in one pass, not once more for every round that looked
    while its calls were still queued (the create lease ends, an instance not yet deleting is
    seen). Another process knows nothing of them: there the create lease is the guard, and the
    lease names this process (``holder``), which says it is alive every second while it has
    calls out (``dispatch.holder_beat``). A lease whose holder stopped saying so belongs to a
    process that died (a worker killed mid-create): the other processes create again at once,
    not ``LAB_CREATE_LEASE_SECONDS`` later.
    """

    BEAT_SECONDS = 1.0
    # The pace of calls is the slowest of this many latest ones.
    PACE_CALLS = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: set[str] = set()
        self._took: deque[float] = deque(maxlen=self.PACE_CALLS)
        self._pid = 0
        self._holder = ""
        self._calls_out = threading.Event()

    @property
    def holder(self) -> str:
        """This process's name in the leases it takes (made again in a forked child, with its heartbeat)."""
        with self._lock:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._holder = f"{socket.gethostname()[:40]}:{self._pid}:{uuid.uuid4().hex[:8]}"
                self._calls_out = threading.Event()
                threading.Thread(target=self._beat, args=(self._calls_out,), name="lease-holder", daemon=True).start()
            return self._holder

    def _beat(self, calls_out: threading.Event) -> None:
        holder = self._holder
        while True:
            calls_out.wait()
            dispatch.holder_beat(holder)
            time.sleep(self.BEAT_SECONDS)
            with self._lock:
                if not self._sessions:
                    calls_out.clear()

    def sessions(self) -> frozenset[str]:
        """The sessions with a call out now."""
        with self._lock:
            return frozenset(self._sessions)

    def room(self) -> int:
        """How many more calls this process may send now: as many as its pool clears within a
        third of a create lease, at the pace of its latest calls (the slowest of them), less
        those out. Before this process has timed a call, at the pace the other processes saw
        (``dispatch.driver_pace``); before anyone has, ``CREATES_OUT_PER_THREAD`` per thread.

        A create queued behind too many others would outlive its lease and be asked again by
        another process (on Kubernetes, charged twice to the course's ResourceQuota until the
        quota controller recounts). A fixed number per thread kept a fast cluster to a few
        dozen creates a round, a class of a thousand to one batch every other round; and each
        of a worker's prefork children learning the pace for itself held the first run each
        child took to that floor, in the middle of a class start.
        """
        threads = settings.LAB_CONTROLLER_THREADS
        least = CREATES_OUT_PER_THREAD * threads
        with self._lock:
            slowest = max(self._took, default=None)
            out = len(self._sessions)
        if slowest is None:
            slowest = dispatch.driver_pace()
        if slowest is None:
            return max(0, least - out)
        clears = threads * (settings.LAB_CREATE_LEASE_SECONDS / 3) / max(slowest, MIN_CALL_SECONDS)
        return max(0, max(least, min(int(clears), MOST_OUT)) - out)

    def pace_forget(self) -> None:
        """Forget how long calls took, here and as shared (the pace falls back to
        ``CREATES_OUT_PER_THREAD`` per thread)."""
        with self._lock:
            self._took.clear()
        dispatch.driver_pace_forget()

    def pace_share(self) -> None:
        """Tell the other processes the pace of this one's latest calls (``room``)."""
        with self._lock:
            slowest = max(self._took, default=None)
        if slowest is not None:
            dispatch.driver_pace_share(slowest)

    def _timed(self, call: Callable[..., object], *args: object) -> object:
        began = time.monotonic()
        try:
            return call(*args)
        finally:
            took = time.monotonic() - began
            with self._lock:
                self._took.append(took)

    def submit(self, session_id: str, call: Callable[..., object], *args: object) -> Future:
        self.holder  # noqa: B018 - this process's holder and heartbeat exist before its first call
        with self._lock:
            self._sessions.add(session_id)
            self._calls_out.set()
        try:
            future = _pool().submit(self._timed, call, *args)
        except BaseException:
            self._done(session_id)
            raise
        future.add_done_callback(lambda _future: self._done(session_id))
        return future

    def _done(self, session_id: str) -> None:
        with self._lock:
            self._sessions.discard(session_id)


driver_calls = _DriverCalls()


def start_creates(session_ids: list[str], by_id: dict[str, Desired]) -> list[tuple[Future, Create]]:
    if not session_ids:
        return []
    sessions_transition(
        {sid: {} for sid in session_ids if by_id[sid].state == SessionState.ADMITTED},
        to=SessionState.STARTING,
        reason=Reason.of("session.requesting"),
        only_from={SessionState.ADMITTED},
    )
    # Only sessions still starting now (a stop may have come first) are created. Each gets a
    # lease: no other run asks again for it until the lease ends, even if this run stops
    # waiting for the answer (a slow cluster) or its worker dies.
    sessions = list(
        LabSession.objects.filter(pk__one_of=session_ids, state=SessionState.STARTING, driver_ref="").select_related(
            "template", "course", "student", "allocation__card__node"
        )
    )
    lease = timezone.now() + timedelta(seconds=settings.LAB_CREATE_LEASE_SECONDS)
    holder = driver_calls.holder
    if sessions:
        dispatch.holder_beat(holder)  # alive before anyone can read the lease
    LabSession.objects.filter(pk__one_of=[s.pk for s in sessions]).update(retry_at=lease, lease_holder=holder)
    return [(driver_calls.submit(str(session.pk), _create, session), Create(str(session.pk))) for session in sessions]


def _create(session: LabSession) -> str:
    """Runs in a pool thread: no database here, only the driver. The node's agent hears of the
    instance once it is recorded (``registrations``), so no registration exists that the
    ledger cannot name. A session that had a lease or a back-off before (``retry_at``, read
    before this round set its lease) may have been created already: the driver looks first."""
    return get_driver().create(replace(launch_spec(session), repeat=session.retry_at is not None))


def unregistrations(node_name: str, entity_id: str) -> list[InstanceCall]:
    """Unregister a replaced instance from its node's agent (local and simulator drivers only)."""
    if not settings.LAB_AGENT_REGISTERS_INSTANCES or not entity_id:
        return []
    node = Node.objects.exclude(agent_url="").filter(name=node_name).values_list("pk", flat=True).first()
    return [] if node is None else [InstanceCall(node, entity_id)]


def registrations(session_ids: list[str]) -> list[InstanceCall]:
    """Register with its node's agent each instance just recorded for a starting session (local
    and simulator drivers only: on Kubernetes the FlexNPU device plugin registers it; not one on
    whole cards, which the agent's share of one card cannot describe)."""
    if not settings.LAB_AGENT_REGISTERS_INSTANCES or not session_ids:
        return []
    # The nodes with an agent first: without one (the simulator's cluster in a class start) there is
    # nothing to read. Joined to them instead, the allocations were read with a plan made while the
    # tables were small, each live allocation matched against every starting session: 30-130 ms of
    # PostgreSQL's time a round in a class start of 2,048 (pg_stat_statements), for no row.
    agents = list(Node.objects.exclude(agent_url="").values_list("pk", flat=True))
    if not agents:
        return []
    rows = (
        Allocation.objects.filter(
            session_id__one_of=session_ids,
            released_at__isnull=True,
            session__state=SessionState.STARTING,
            cards=1,
            card__node_id__in=agents,
        )
        .exclude(session__driver_ref="")
        .values_list("card__node_id", "session__driver_ref", "card__index", "core_percent", "memory_mib", "scenario")
    )
    return [InstanceCall(node, ref, index, core, memory, scenario) for node, ref, index, core, memory, scenario in rows]


def bind_created(refs: dict[str, str]) -> None:
    """``bind_instance`` for the instances a round created, or saw created under their create lease (not
    recovered ones): one transaction, four statements on PostgreSQL, whose row locks keep it
    exact; ``bind_instance`` each elsewhere."""
    if not refs:
        return
    if connection.vendor != "postgresql":
        for session_id, ref in refs.items():
            bind_instance(session_id, ref, recovered=False)
        return
    with transaction.atomic():
        # Stopping too, as in ``bind_instance``.
        alive = (
            LabSession.objects.select_for_update()
            .filter(pk__one_of=list(refs), state__in=(SessionState.STARTING, SessionState.STOPPING))
            .order_by("pk")
            .values_list("pk", "driver_ref")
        )
        rows_update(LabSession, {pk: {"driver_ref": refs[str(pk)]} for pk, ref in alive if ref != refs[str(pk)]})
        allocations = Allocation.objects.filter(session_id__one_of=list(refs), released_at__isnull=True)
        rows_update(Allocation, {pk: {"entity_id": refs[str(sid)]} for pk, sid in allocations.values_list("pk", "session_id")})


def bind_instance(session_id: str, ref: str, *, recovered: bool) -> None:
    """Record the instance's reference on the session and its allocation (the FlexNPU entity-id)."""
    with transaction.atomic():
        # Stopping too: a stop that came while the driver was creating must still know the
        # instance, so that its end unregisters it from the node.
        alive = LabSession.objects.filter(pk=session_id, state__in=(SessionState.STARTING, SessionState.STOPPING))
        bound = alive.exclude(driver_ref=ref).update(driver_ref=ref)
        Allocation.objects.filter(session_id=session_id, released_at__isnull=True).update(entity_id=ref)
        if bound and recovered:
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.SESSION_BOUND,
                session_id=session_id,
                entity_id=ref,
                message="the instance existed but was not recorded (a worker stopped mid-start); recorded it",
            )


def allocation_rebind(session_id: str, *, node: str, card_index: int) -> bool:
    """Move a live allocation to the card the node reports the instance on (a ``RepairEvent`` says so).

    The platform chose another card than the ledger reserved (the device plugin, not the
    portal, picks the card on Kubernetes): the ledger follows the cluster, never the other
    way round, so the allocation pass sees the real use of both cards from now on. Done under
    the allocation lock so no pass decides on a half-moved ledger.
    """

    card = Card.objects.filter(node__name=node, index=card_index).first()
    if card is None:
        logger.warning("controller: session %s reported on unknown card %s/%s", session_id, node, card_index)
        return False
    with transaction.atomic():
        allocation_lock()
        allocation = (
            Allocation.objects.select_for_update()
            .filter(session_id=session_id, released_at__isnull=True)
            .select_related("card__node")
        ).first()
        # Whole cards are not moved one at a time: one card reported says nothing of the others.
        if allocation is None or allocation.card_id == card.pk or allocation.cards > 1:
            return False
        was = f"{allocation.card.node.name} / NPU {allocation.card.index}"
        Allocation.objects.filter(pk=allocation.pk).update(card=card)
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.CARD_REBOUND,
            session_id=session_id,
            node=card.node,
            entity_id=allocation.entity_id,
            message=f"the ledger had {was}; the node reports {node} / NPU {card_index}: allocation moved",
        )
    return True


def launch_spec(session: LabSession) -> LaunchSpec:
    """What the driver needs to create the session's instance on the card the ledger reserved."""
    allocation = session.allocation
    card = allocation.card
    template = session.template
    return LaunchSpec(
        session_id=str(session.pk),
        kind=template.kind,
        image=template.image,
        secret=session.secret,
        card=CardBinding(
            node=card.node.name,
            card_index=card.index,
            die_id=card.die_id,
            chip_type=card.chip_type,
            core_percent=allocation.core_percent,
            memory_mib=allocation.memory_mib,
            scenario=allocation.scenario,
            card_memory_mib=card.memory_mib,
            node_labels=tuple(sorted((str(k), str(v)) for k, v in (card.node.labels or {}).items())),
            cards=allocation.cards,
            share_policy=template.share_policy,
        ),
        course_code=session.course.code,
        student=session.student.get_username(),
        **template_launch_fields(template),
    )


def template_launch_fields(template) -> dict:
    """What a template gives a ``LaunchSpec`` besides its kind and image: command, arguments,
    model and the pod's host resources."""
    return {
        "command": tuple(template.command or ()),
        "args": tuple(template.args or ()),
        "model": template.model,
        "host": HostResources(
            cpu_request_millicores=template.cpu_request_millicores,
            cpu_limit_millicores=template.cpu_limit_millicores,
            memory_request_mib=template.host_memory_request_mib,
            memory_limit_mib=template.host_memory_limit_mib,
            ephemeral_storage_mib=template.ephemeral_storage_mib,
        ),
    }


def with_jupyter_token(url: str, *, kind: str, secret: str) -> str:
    """The student's link opens JupyterLab logged in: add the session's token when the driver's
    URL does not carry it (a Kubernetes URL pattern knows nothing of the secret)."""
    if not url or "token=" in url or kind != "jupyter":
        return url
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode({"token": secret})]))
    return urlunsplit(parts._replace(query=query))
