"""The controller's rounds: one run at a time, each round admitting, observing, deciding and acting
(see the package docstring); the ledger read as ``Desired``, the cluster as ``Seen``."""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace

from django.conf import settings
from django.utils import timezone

from labs import dispatch
from labs.domain.lifecycle import (
    Create,
    Delete,
    Desired,
    NodeReboot,
    Seen,
    Timing,
    decide,
    session_deadline,
    session_limit_minutes,
)
from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.drivers import DriverError, Observed, get_driver
from labs.models import LabSession, Node
from labs.services.agents import InstanceCall, instance_calls_make
from labs.services.allocation import allocation_pass
from labs.services.controller.creates import driver_calls
from labs.services.controller.execute import ControllerReport, answers_collect, execute_actions
from labs.services.events import events_batch
from labs.services.locks import CONTROLLER_LOCK_KEY, try_lock
from labs.services.reboots import nodes_observe
from labs.services.sessions import session_stop

logger = logging.getLogger(__name__)


# Sessions the controller acts on; queued ones belong to the allocation pass.
OPEN_STATES = (SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING, SessionState.STOPPING)
# Sessions waiting on the cluster: while there are any, the controller looks again shortly.
IN_PROGRESS = (SessionState.ADMITTED, SessionState.STARTING, SessionState.STOPPING)
MAX_ROUNDS = 5


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
    ended = time.monotonic()
    for round_number in range(max_rounds):
        if round_number:
            # During a burst every launch wakes the controller: a pause between rounds lets a
            # round take a batch of launches rather than one each, and leaves the CPU to the
            # web server that is taking them. The wait for the last round's answers is part of it.
            time.sleep(max(0.0, ended + pause - time.monotonic()))
        with try_lock(CONTROLLER_LOCK_KEY) as held:  # for a round; a worker that dies lets go
            if not held:
                report.skipped = True  # the run that holds it goes round again for our wake
                return report
            dispatch.controller_dequeued()
            seen = dispatch.controller_generation()
            calls: list[InstanceCall] = []
            answers: list[tuple[Future, Create | Delete]] = []
            cost = time.process_time()
            acted = reconcile_once(report, agent_calls=calls, answers=answers)
            # Paced by its own cost: a round reads every open session and lists every lab pod,
            # so in a class of a thousand it costs a good part of a second of CPU. The pause
            # after it is at least as long, so the controller takes at most half of a core and
            # each round a bigger batch, instead of the rounds crowding out the web server, the
            # database and the cluster that do the work it waits for. Its CPU, not the time it
            # took: on a machine the class start keeps busy a round takes three to five times
            # its CPU, and a pause as long as that held the labs' admission and their being
            # seen running to a round every two seconds.
            pause = max(settings.LAB_CONTROLLER_ROUND_PAUSE_SECONDS, time.process_time() - cost)
            ended = time.monotonic()
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
        out = driver_calls.sessions()
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
        return execute_actions(actions, sessions, now, report, agent_calls, answers, out)


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
        "lease_holder",
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
    holders: dict[str, str] = {}
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
        holder,
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
        if holder and not ref and retry_at is not None:
            holders[str(pk)] = holder
    return _dead_holders_leases_ended(sessions, holders)


def _dead_holders_leases_ended(sessions: list[Desired], holders: dict[str, str]) -> list[Desired]:
    """``sessions`` with the create leases of processes that died ended now (``holders``: each
    leased session's holder). This process's own leases stand (``driver_calls`` covers them), and
    when Redis does not answer every lease stands until it ends."""
    others = set(holders.values()) - {driver_calls.holder}
    alive = dispatch.holders_alive(others)
    if alive is None:
        return sessions
    dead = others - alive
    if not dead:
        return sessions
    ended = {sid for sid, holder in holders.items() if holder in dead}
    logger.info("controller: the create leases of %d sessions ended with their process (%s)", len(ended), ", ".join(sorted(dead)))
    return [replace(s, retry_at=None) if s.session_id in ended else s for s in sessions]


def _stored_reason(code: str, params: dict) -> Reason | None:
    with contextlib.suppress(ValueError, TypeError, KeyError):
        return Reason.from_json({"code": code, "params": params}) if code else None
    return None


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
