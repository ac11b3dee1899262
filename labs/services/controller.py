"""The lifecycle controller: one loop that makes the cluster do what the ledger says.

Desired state is the ledger (sessions and their allocations), observed state is one
``observe()`` of the cluster driver; ``labs.domain.lifecycle.decide`` compares them and this
module carries out what it decides. One run (``controller_run``):

1. the allocation pass admits and places queued sessions (``labs.services.allocation``);
2. the driver is observed once — every instance, one call;
3. the open sessions are read from the ledger (after the observation, so an instance is never
   older than the ledger row that asked for it);
4. ``decide`` returns the actions; driver calls (create, delete) run side by side in a small
   thread pool, every ledger change is a conditional UPDATE, and pages hear of the changes
   once, at the end, one message per student and course;
5. the node agents hear of the instances the round recorded or ended (register, unregister) —
   after the round has let go of the lock, every node at once, each call with a short deadline
   (``labs.services.agents.instance_calls_make``), so a hung agent holds up no other node.

It is woken on demand (a launch, a stop: ``labs.dispatch.controller_wake``) and by Celery beat
every ``LAB_CONTROLLER_SECONDS``. One run at a time: a run that finds another one running
returns at once, and the running one goes round again if a wake arrived meanwhile (a
generation counter read before and after), so no wake is lost and a burst of launches never
queues hundreds of blocked runs. Every action is idempotent and every state change
conditional, so a worker killed mid-run, a redelivered task or two runs at once change
nothing: the next run sees the same ledger and the same cluster and finishes the job.

The slower half of observation — what each node's agent reports (cards, instances, NPU use) —
is ``labs.services.reconcile``, on its own beat period.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from urllib.parse import urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from labs import dispatch
from labs.domain.lifecycle import (
    Bind,
    Create,
    Delete,
    Desired,
    Expire,
    Fail,
    Finish,
    NodeReboot,
    Note,
    Rebind,
    RebootWait,
    Relaunch,
    Restarted,
    Running,
    Seen,
    Timing,
    decide,
    session_deadline,
    session_limit_minutes,
)
from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.drivers import DriverError, DriverRefused, LaunchSpec, Observed, get_driver
from labs.drivers.base import CardBinding, HostResources
from labs.models import Allocation, Card, LabSession, Node, RepairEvent
from labs.services.agents import InstanceCall, instance_calls_make
from labs.services.allocation import allocation_pass
from labs.services.events import events_batch
from labs.services.locks import CONTROLLER_LOCK_KEY, allocation_lock, try_lock
from labs.services.reboots import nodes_observe
from labs.services.rows import rows_update
from labs.services.selftest import selftests_record
from labs.services.sessions import (
    reason_fields,
    session_begin_stop,
    session_note,
    session_relaunch,
    session_stop,
    sessions_note,
    sessions_transition,
)

logger = logging.getLogger(__name__)

# Sessions the controller acts on; queued ones belong to the allocation pass.
OPEN_STATES = (SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING, SessionState.STOPPING)
# Sessions waiting on the cluster: while there are any, the controller looks again shortly.
IN_PROGRESS = (SessionState.ADMITTED, SessionState.STARTING, SessionState.STOPPING)
MAX_ROUNDS = 5
VANISHED = {"session.vanished", "session.vanished_before_start"}


@dataclass
class ControllerReport:
    rounds: int = 0
    skipped: bool = False
    admitted: int = 0
    created: int = 0
    create_errors: int = 0
    running: int = 0
    failed: int = 0
    finished: int = 0
    deleted: int = 0
    rebound: int = 0
    in_flight: int = 0
    observe_error: str = ""
    actions: dict[str, int] = field(default_factory=dict)


def controller_run(*, max_rounds: int = MAX_ROUNDS) -> ControllerReport:
    """Run the controller until the ledger and the cluster agree or nothing more can be done now.

    A run that finds another holding the lock returns at once and leaves the queued marker set
    (``dispatch``): the holder goes round again for the wakes that came (the generation moved),
    so while one round runs, a burst of launches queues one more run, not one per launch. The
    holder clears the marker as its rounds start, and when it ends sends a new run for any
    wake that came after its last round began.

    A round's calls to the node agents are made with the lock let go. When they are slow (a
    hung agent keeps them for ``LAB_AGENT_DEADLINE_SECONDS``), the run hands over at once —
    the new run for the wakes that came, the follow-up for the labs in progress — and ends
    when the calls do: another run carries on meanwhile, on another worker.
    """
    report = ControllerReport()
    seen = None
    pause = settings.LAB_CONTROLLER_ROUND_PAUSE_SECONDS
    for round_number in range(max_rounds):
        if round_number:
            # During a burst every launch wakes the controller: a pause between rounds lets a
            # round take a batch of launches rather than one each, and leaves the CPU to the
            # web server that is taking them.
            time.sleep(pause)
        with try_lock(CONTROLLER_LOCK_KEY) as held:  # for a round; a worker that dies lets go
            if not held:
                report.skipped = True  # the run that holds it goes round again for our wake
                return report
            dispatch.controller_dequeued()
            seen = dispatch.controller_generation()
            calls: list[InstanceCall] = []
            answers: list[tuple[Future, Create | Delete]] = []
            started = time.monotonic()
            acted = reconcile_once(report, agent_calls=calls, answers=answers)
            # Paced by its own cost: a round reads every open session and lists every lab pod,
            # so in a class of a thousand it takes a good part of a second. The pause after it
            # is at least as long, so the controller takes at most half of a core and each
            # round a bigger batch, instead of the rounds crowding out the web server, the
            # database and the cluster that do the work it waits for.
            pause = max(settings.LAB_CONTROLLER_ROUND_PAUSE_SECONDS, time.monotonic() - started)
        # The driver's answers are awaited with the lock let go: on a real cluster a batch of
        # creates takes seconds, and meanwhile another run admits the next launches and starts
        # their creates. What the answers record (the instance's reference, a failure) is a
        # fact, not a decision: conditional and idempotent, whichever run records it first.
        answers_collect(answers, report, calls)
        hand_over = _HandOver(seen)
        instance_calls_make(calls, on_slow=hand_over)
        if hand_over.done:
            return report
        after = dispatch.controller_generation()
        # Another round when this one could make more progress, or a wake came in while it ran.
        if not acted and (seen is None or after == seen):
            break
    _run_end(seen, pause)
    return report


def _run_end(seen: int | None, pause: float = 0.0) -> None:
    """A run ends: a new run for the wakes since ``seen``, a follow-up while labs are in progress
    (no sooner than ``pause``, the pause its last round earned)."""
    dispatch.controller_done(seen)
    if LabSession.objects.filter(state__in=IN_PROGRESS).exists():
        dispatch.controller_follow_up(max(settings.LAB_CONTROLLER_FOLLOW_UP_SECONDS, pause))


@dataclass
class _HandOver:
    """Called when a round's agent calls are slow: the run's end is done now, not after them."""

    seen: int | None
    done: bool = False

    def __call__(self) -> None:
        _run_end(self.seen)
        self.done = True


def reconcile_once(
    report: ControllerReport | None = None,
    *,
    agent_calls: list[InstanceCall] | None = None,
    answers: list[tuple[Future, Create | Delete]] | None = None,
) -> bool:
    """One round: admit, observe, decide, act. Returns whether another round could do more now.

    The node agents' part (registering the instances the round recorded, unregistering those
    of the sessions it ended) is added to ``agent_calls``, and the driver calls it started to
    ``answers``, for the caller to collect (``answers_collect``) and make once it has let go of
    the controller's lock; without the lists, the round does both at its end.
    """
    report = report or ControllerReport()
    if agent_calls is None or answers is None:
        calls: list[InstanceCall] = []
        pending: list[tuple[Future, Create | Delete]] = []
        acted = reconcile_once(report, agent_calls=calls, answers=pending)
        answers_collect(pending, report, calls)
        instance_calls_make(calls)
        return acted
    report.rounds += 1
    with events_batch():
        report.admitted += len(allocation_pass().admitted)
        # Before looking: a call that answers while we look may not show in what we see. The
        # ledger is read before the look too: an instance another process records (binds) after
        # this round's list was taken is absent from the list, and with its reference already
        # read it would look vanished.
        out = _calls.sessions()
        sessions = _desired()
        try:
            seen = {sid: _seen(observed) for sid, observed in get_driver().observe().items()}
        except DriverError as exc:
            # Without the cluster's view nothing may be concluded from absence; creates still go.
            logger.warning("controller: the cluster driver cannot be observed: %s", exc)
            report.observe_error = str(exc)
            seen = None
        now = timezone.now()
        sessions = _with_node_reboots(sessions, seen, now.timestamp())
        actions = decide(
            sessions,
            seen,
            now=now.timestamp(),
            timing=Timing(
                settings.LAB_SPAWN_TIMEOUT_SECONDS,
                settings.LAB_STOP_TIMEOUT_SECONDS,
                start_restarts=settings.LAB_START_RESTARTS,
                reboot_device_wait_seconds=settings.LAB_REBOOT_DEVICE_WAIT,
            ),
        )
        for action in actions:
            name = type(action).__name__
            report.actions[name] = report.actions.get(name, 0) + 1
        return _execute(actions, sessions, now, report, agent_calls, answers, out)


def _with_node_reboots(sessions: list[Desired], seen: dict[str, Seen] | None, now: float) -> list[Desired]:
    """``sessions``, each with its node's latest restart.

    The nodes themselves are looked at (the driver's ``nodes()``: boot ids, NPUs reported) only
    when it matters, not every round: while a starting or running lab's instance shows failed
    (a restart is what may explain it) or a node that restarted still waits for its NPUs.
    """
    reboots = _node_reboots()
    if seen is not None:
        live = (SessionState.STARTING, SessionState.RUNNING)
        failed = any(
            (instance := seen.get(s.session_id)) is not None and instance.phase == "failed" and not instance.deleting
            for s in sessions
            if s.state in live
        )
        wait = settings.LAB_REBOOT_DEVICE_WAIT
        waiting = any(r.devices_at is None and now - r.at <= wait for r in reboots.values())
        if (failed or waiting) and nodes_observe(wake=False):
            reboots = _node_reboots()
    if not reboots:
        return sessions
    return [replace(s, node_reboot=reboots[s.node]) if s.node in reboots else s for s in sessions]


def _node_reboots() -> dict[str, NodeReboot]:
    """The latest restart of every node that restarted, by node name."""
    rows = Node.objects.filter(rebooted_at__isnull=False).values_list("name", "rebooted_at", "devices_back_at")
    return {name: NodeReboot(at.timestamp(), back.timestamp() if back else None) for name, at, back in rows}


def _seen(observed: Observed) -> Seen:
    return Seen(
        observed.session_id,
        observed.status.value,
        ref=observed.ref,
        reason=observed.reason,
        access_url=observed.access_url,
        node=observed.node,
        card_index=observed.card_index,
        deleting=observed.deleting,
        restarts=observed.restarts,
        last_exit=observed.last_exit,
    )


def _desired() -> list[Desired]:
    rows = LabSession.objects.filter(state__in=OPEN_STATES).values_list(
        "pk",
        "state",
        "driver_ref",
        "reason_code",
        "reason_params",
        "started_at",
        "running_at",
        "stopping_at",
        "create_attempts",
        "retry_at",
        "allocation__card__node__name",
        "allocation__card__index",
        "template__max_lifetime_minutes",
        "course__quota__max_session_minutes",
        "extensions_used",
        "course__quota__extension_minutes",
        "restarts",
        "reboot_at",
        "replaced_ref",
    )
    sessions = []
    for (
        pk,
        state,
        ref,
        code,
        params,
        started,
        running,
        stopping,
        attempts,
        retry_at,
        node,
        card,
        lifetime,
        course_limit,
        extensions,
        extension_minutes,
        restarts,
        reboot_at,
        replaced_ref,
    ) in rows:
        minutes = session_limit_minutes(lifetime, course_limit, extensions * (extension_minutes or 0))
        sessions.append(
            Desired(
                str(pk),
                SessionState(state),
                driver_ref=ref,
                reason=_stored_reason(code, params),
                started_at=started.timestamp() if started else None,
                stopping_at=stopping.timestamp() if stopping else None,
                create_attempts=attempts,
                retry_at=retry_at.timestamp() if retry_at else None,
                node=node or "",
                card_index=card,
                expires_at=session_deadline(running.timestamp() if running else None, minutes),
                lifetime_minutes=minutes or 0,
                restarts=restarts,
                reboot_at=reboot_at.timestamp() if reboot_at else None,
                replaced_ref=replaced_ref,
            )
        )
    return sessions


def _stored_reason(code: str, params: dict) -> Reason | None:
    with contextlib.suppress(ValueError, TypeError, KeyError):
        return Reason.from_json({"code": code, "params": params}) if code else None
    return None


# -- carrying out the decisions ---------------------------------------------------------------


def _execute(
    actions: list,
    sessions: list[Desired],
    now,
    report: ControllerReport,
    agent_calls: list[InstanceCall],
    answers: list[tuple[Future, Create | Delete]],
    out: frozenset[str] = frozenset(),
) -> bool:
    by_id = {s.session_id: s for s in sessions}
    freed = False
    # A session whose create or delete this process is still making, or was making when the
    # round looked at the cluster (``out``), is not asked for again, whatever its lease says:
    # the answer is coming or came after the look, and a busy cluster would only get the same
    # calls twice, queued behind the first ones.
    busy = out | _calls.sessions()
    wanted = [a.session_id for a in actions if isinstance(a, Create) and a.session_id not in busy]
    # No more than the pool clears well inside a create lease: a create left queued behind a
    # class's worth of others would outlive its lease and be asked again by another process,
    # and on Kubernetes a create asked twice is charged twice to the course's ResourceQuota
    # (admission counts it before the name is checked) until the quota controller recounts.
    # The rest stay admitted for the next round, which comes at once.
    room = max(0, CREATES_OUT_PER_THREAD * settings.LAB_CONTROLLER_THREADS - len(_calls.sessions()))
    creates = wanted[:room]
    links = dict(
        (str(pk), (kind, secret))
        for pk, kind, secret in LabSession.objects.filter(
            pk__in=[a.session_id for a in actions if isinstance(a, Running)]
        ).values_list("pk", "template__kind", "secret")
    )
    deletes = [a for a in actions if isinstance(a, Delete) and a.session_id not in busy]
    pending = _start_creates(creates, by_id)
    pending += [(_calls.submit(a.session_id, get_driver().delete, a.session_id), a) for a in deletes]
    running: dict[str, dict[str, object]] = {}
    finishing: list[str] = []
    notes: dict[str, Reason] = {}
    bound: list[str] = []
    late: dict[str, str] = {}
    for action in actions:
        match action:
            case Bind(session_id, ref):
                # Under its create lease the answer just came late (a busy cluster: many at once,
                # bound together below); after it, a worker died between creating the instance
                # and recording it: a repair worth an event.
                lease = by_id[session_id].retry_at
                if lease is None or lease <= now.timestamp():
                    _bind(session_id, ref, recovered=True)
                else:
                    late[session_id] = ref
                bound.append(session_id)
            case Running(session_id, url, restarts, said):
                kind, secret = links.get(session_id, ("", ""))
                url = with_jupyter_token(url, kind=kind, secret=secret)
                running[session_id] = {"access_url": url[:500], "restarts": restarts, "replaced_ref": "", **reason_fields(said)}
            case Fail(session_id, reason):
                if session_begin_stop(session_id, reason=reason, failed=True):
                    report.failed += 1
                    if reason.code in VANISHED:
                        RepairEvent.objects.create(
                            kind=RepairEvent.Kind.SESSION_FAILED, session_id=session_id, message=str(reason)[:500]
                        )
            case Note(session_id, reason):
                notes[session_id] = reason
            case Finish(session_id):
                finishing.append(session_id)
            case Rebind(session_id, node, card_index):
                if allocation_rebind(session_id, node=node, card_index=card_index):
                    report.rebound += 1
            case Expire(session_id, minutes):
                session_stop(session_id=session_id, reason=Reason.of("session.lifetime", minutes=minutes))
            case Restarted(session_id, restarts, reason):
                # Rare (an OOM kill, a crash): one conditional UPDATE each, the count and the student's reason.
                session_note(session_id, reason=reason, state=SessionState.RUNNING, restarts=restarts)
            case RebootWait(session_id, state, reboot_at, reason):
                session_note(session_id, reason=reason, state=state, reboot_at=_moment(reboot_at))
            case Relaunch(session_id, ref, reboot_at):
                # Rare (a node restarted): the session starts again on its allocation, the failed
                # instance goes, and the new one is made once it is gone (``decide``).
                if session_relaunch(session_id, ref=ref, reboot_at=_moment(reboot_at)):
                    pending.append((_calls.submit(session_id, get_driver().delete, session_id), Delete(session_id)))
                    agent_calls.extend(_unregistrations(by_id[session_id].node, ref))
    # The late answers, progress notes, the labs that came up and those whose instance is gone,
    # each kind in one transaction.
    _bind_created(late)
    sessions_note(notes, state=SessionState.STARTING)
    report.running += len(sessions_transition(running, to=SessionState.RUNNING, only_from={SessionState.STARTING}))
    finished = _finish(finishing, agent_calls)
    report.finished += finished
    freed = freed or finished > 0
    agent_calls.extend(_registrations(bound))
    answers.extend(pending)
    # Another round is worth it when the driver was asked for something (a delete may be done
    # already) or a release freed capacity the allocation pass can hand out.
    return bool(pending) or freed or len(creates) < len(wanted)


def answers_collect(
    answers: list[tuple[Future, Create | Delete]], report: ControllerReport, agent_calls: list[InstanceCall]
) -> None:
    """Wait for a round's driver calls and record their answers: the created instances bound,
    registered with their nodes (added to ``agent_calls``), failures recorded.

    Not for ever: a slow cluster must not hold the run for a whole batch. Answers that come
    later are not lost: the instance shows in the next observe() and is bound then; a failed
    create is tried again when its lease ends.
    """
    if not answers:
        return
    done, _ = wait([future for future, _ in answers], timeout=settings.LAB_CONTROLLER_WAIT_SECONDS)
    created: dict[str, str] = {}
    with events_batch():
        for future, action in answers:
            if future in done:
                _collect(future, action, report, created)
            else:
                report.in_flight += 1
        _bind_created(created)
    agent_calls.extend(_registrations(list(created)))
    _simulated_selftests(list(created))


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
    seen). Another process knows nothing of them: there the create lease is the guard.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: set[str] = set()

    def sessions(self) -> frozenset[str]:
        """The sessions with a call out now."""
        with self._lock:
            return frozenset(self._sessions)

    def submit(self, session_id: str, call: Callable[..., object], *args: object) -> Future:
        with self._lock:
            self._sessions.add(session_id)
        try:
            future = _pool().submit(call, *args)
        except BaseException:
            self._done(session_id)
            raise
        future.add_done_callback(lambda _future: self._done(session_id))
        return future

    def _done(self, session_id: str) -> None:
        with self._lock:
            self._sessions.discard(session_id)


_calls = _DriverCalls()
# Creates a process has out at once, per pool thread (a create is four requests on Kubernetes).
CREATES_OUT_PER_THREAD = 4


def _start_creates(session_ids: list[str], by_id: dict[str, Desired]) -> list[tuple[Future, Create]]:
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
        LabSession.objects.filter(pk__in=session_ids, state=SessionState.STARTING, driver_ref="").select_related(
            "template", "course", "student", "allocation__card__node"
        )
    )
    lease = timezone.now() + timedelta(seconds=settings.LAB_CREATE_LEASE_SECONDS)
    LabSession.objects.filter(pk__in=[s.pk for s in sessions]).update(retry_at=lease)
    return [(_calls.submit(str(session.pk), _create, session), Create(str(session.pk))) for session in sessions]


def _create(session: LabSession) -> str:
    """Runs in a pool thread: no database here, only the driver. The node's agent hears of the
    instance once it is recorded (``_registrations``), so no registration exists that the
    ledger cannot name. A session that had a lease or a back-off before (``retry_at``, read
    before this round set its lease) may have been created already: the driver looks first."""
    return get_driver().create(replace(launch_spec(session), repeat=session.retry_at is not None))


def _moment(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)


def _unregistrations(node_name: str, entity_id: str) -> list[InstanceCall]:
    """Unregister a replaced instance from its node's agent (local and simulator drivers only)."""
    if not settings.LAB_AGENT_REGISTERS_INSTANCES or not entity_id:
        return []
    node = Node.objects.exclude(agent_url="").filter(name=node_name).values_list("pk", flat=True).first()
    return [] if node is None else [InstanceCall(node, entity_id)]


def _registrations(session_ids: list[str]) -> list[InstanceCall]:
    """Register with its node's agent each instance just recorded for a starting session (local
    and simulator drivers only: on Kubernetes the FlexNPU device plugin registers it; not one on
    whole cards, which the agent's share of one card cannot describe)."""
    if not settings.LAB_AGENT_REGISTERS_INSTANCES or not session_ids:
        return []
    rows = (
        Allocation.objects.filter(
            session_id__in=session_ids, released_at__isnull=True, session__state=SessionState.STARTING, cards=1
        )
        .exclude(card__node__agent_url="")
        .exclude(session__driver_ref="")
        .values_list("card__node_id", "session__driver_ref", "card__index", "core_percent", "memory_mib", "scenario")
    )
    return [InstanceCall(node, ref, index, core, memory, scenario) for node, ref, index, core, memory, scenario in rows]


def _collect(future: Future, action: Create | Delete, report: ControllerReport, created: dict[str, str]) -> None:
    """One driver answer: a failure is recorded now; a created instance's reference goes into
    ``created`` (session id -> reference), which the caller binds, all at once."""
    session_id = action.session_id
    try:
        result = future.result()
    except DriverRefused as exc:
        if isinstance(action, Create):
            report.create_errors += 1
            session_begin_stop(session_id, reason=Reason.of("session.create_failed", error=str(exc)[:300]), failed=True)
        else:
            _delete_failed(action, exc)
        return
    except Exception as exc:  # DriverError, or a driver bug: either way the next run tries again
        if not isinstance(exc, DriverError):
            logger.exception("controller: the driver failed on session %s", session_id)
        if isinstance(action, Create):
            report.create_errors += 1
            _create_failed(session_id, exc)
        else:
            _delete_failed(action, exc)
        return
    if isinstance(action, Create):
        report.created += 1
        created[session_id] = result
    else:
        report.deleted += 1
        if action.orphan:
            session = LabSession.objects.filter(pk=session_id).only("state").first()
            RepairEvent.objects.create(
                kind=RepairEvent.Kind.ORPHAN_DELETED,
                session=session,
                message=f"deleted an instance of {'a ' + session.state + ' session' if session else 'no known session'}",
            )


def _simulated_selftests(session_ids: list[str]) -> None:
    """Simulated labs report their isolation self-test as a real lab's entrypoint does (judged the
    same way, ``selftests_record``), so the demo shows the result; real drivers' labs report
    themselves through the endpoint."""
    driver = get_driver()
    visible = {sid: mib for sid in session_ids if (mib := driver.simulated_selftest_mib(sid)) is not None}
    selftests_record(visible)


def _bind_created(refs: dict[str, str]) -> None:
    """``_bind`` for the instances a round created, or saw created under their create lease (not
    recovered ones): one transaction, four statements on PostgreSQL, whose row locks keep it
    exact; ``_bind`` each elsewhere."""
    if not refs:
        return
    if connection.vendor != "postgresql":
        for session_id, ref in refs.items():
            _bind(session_id, ref, recovered=False)
        return
    with transaction.atomic():
        # Stopping too, as in ``_bind``.
        alive = (
            LabSession.objects.select_for_update()
            .filter(pk__in=list(refs), state__in=(SessionState.STARTING, SessionState.STOPPING))
            .order_by("pk")
            .values_list("pk", "driver_ref")
        )
        rows_update(LabSession, {pk: {"driver_ref": refs[str(pk)]} for pk, ref in alive if ref != refs[str(pk)]})
        allocations = Allocation.objects.filter(session_id__in=list(refs), released_at__isnull=True)
        rows_update(Allocation, {pk: {"entity_id": refs[str(sid)]} for pk, sid in allocations.values_list("pk", "session_id")})


def _bind(session_id: str, ref: str, *, recovered: bool) -> None:
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


def _create_failed(session_id: str, exc: Exception) -> None:
    session = LabSession.objects.filter(pk=session_id, state=SessionState.STARTING).only("create_attempts").first()
    if session is None:
        return
    attempts = session.create_attempts + 1
    error = str(exc)[:300] or type(exc).__name__
    if attempts >= settings.LAB_CREATE_ATTEMPTS:
        session_begin_stop(session_id, reason=Reason.of("session.create_failed", error=error), failed=True)
        return
    # Back off 0.5, 1, 2, ... seconds, at most LAB_CREATE_BACKOFF_MAX_SECONDS: a cluster API that
    # recovers should see its queue of labs go out within a controller period or two.
    delay = min(settings.LAB_CREATE_BACKOFF_MAX_SECONDS, 0.5 * 2 ** (attempts - 1))
    session_note(
        session_id,
        reason=Reason.of("session.create_retry", attempt=attempts, attempts=settings.LAB_CREATE_ATTEMPTS, error=error),
        state=SessionState.STARTING,
        create_attempts=attempts,
        retry_at=timezone.now() + timedelta(seconds=delay),
    )


def _delete_failed(action: Delete, exc: Exception) -> None:
    if action.orphan:
        RepairEvent.objects.create(
            kind=RepairEvent.Kind.REPAIR_FAILED, message=f"could not delete instance of {action.session_id}: {exc}"[:500]
        )
    else:
        session_note(action.session_id, reason=Reason.of("session.stop_retry", error=str(exc)[:300]), state=SessionState.STOPPING)


def _finish(session_ids: list[str], agent_calls: list[InstanceCall]) -> int:
    """stopping -> stopped/failed for the sessions whose instance is gone; their allocations are
    released with them, and their registrations on the nodes go into ``agent_calls``."""
    if not session_ids:
        return 0
    ends: dict[SessionState, dict[str, dict[str, object]]] = {}
    registered: dict[str, InstanceCall] = {}
    stopping = LabSession.objects.filter(pk__in=session_ids, state=SessionState.STOPPING)
    for session in stopping.select_related("allocation__card__node").order_by():
        allocation = getattr(session, "allocation", None)
        entity_id = session.driver_ref or (allocation.entity_id if allocation is not None else "")
        if settings.LAB_AGENT_REGISTERS_INSTANCES and allocation is not None and entity_id and allocation.card.node.agent_url:
            # An agent that does not answer: the node reconciler unregisters it once it does.
            registered[str(session.pk)] = InstanceCall(allocation.card.node_id, entity_id)
        ends.setdefault(SessionState(session.end_state or SessionState.STOPPED), {})[str(session.pk)] = {}
    ended = [sid for end, ids in ends.items() for sid in sessions_transition(ids, to=end, only_from={SessionState.STOPPING})]
    agent_calls.extend(registered[sid] for sid in ended if sid in registered)
    return len(ended)


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


def sessions_shutdown(*, reason: Reason, timeout: float = 30.0) -> int:
    """Stop every open session and run the controller until their instances are gone (the demo's Ctrl-C)."""
    ended = 0
    for session_id in LabSession.objects.exclude(state__in=[SessionState.STOPPED, SessionState.FAILED]).values_list(
        "pk", flat=True
    ):
        if session_stop(session_id=session_id, reason=reason):
            ended += 1
    deadline = time.monotonic() + timeout
    while LabSession.objects.filter(state=SessionState.STOPPING).exists() and time.monotonic() < deadline:
        reconcile_once()
    return ended
