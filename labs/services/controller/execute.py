"""Carrying out a round's decisions: the ledger changes, the driver calls started, their answers recorded."""

from __future__ import annotations

import logging
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from labs.domain.lifecycle import (
    Bind,
    Create,
    Delete,
    Desired,
    Expire,
    Fail,
    Finish,
    Note,
    Rebind,
    RebootWait,
    Relaunch,
    Restarted,
    Running,
)
from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.drivers import DriverError, DriverRefused, get_driver
from labs.models import LabSession, RepairEvent
from labs.services.agents import InstanceCall
from labs.services.controller.creates import (
    allocation_rebind,
    bind_created,
    bind_instance,
    driver_calls,
    registrations,
    start_creates,
    unregistrations,
    with_jupyter_token,
)
from labs.services.events import events_batch
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


def execute_actions(
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
    busy = out | driver_calls.sessions()
    wanted = [a.session_id for a in actions if isinstance(a, Create) and a.session_id not in busy]
    # No more than the pool clears well inside a create lease (``driver_calls.room``): a create
    # left queued behind a class's worth of others would outlive its lease and be asked again by
    # another process. The rest stay admitted for the next round, which comes at once. (Asked
    # only when there is something to send: a process that has timed no call reads the shared
    # pace from Redis.)
    creates = wanted[: driver_calls.room()] if wanted else []
    links = dict(
        (str(pk), (kind, secret))
        for pk, kind, secret in LabSession.objects.filter(
            pk__one_of=[a.session_id for a in actions if isinstance(a, Running)]
        ).values_list("pk", "template__kind", "secret")
    )
    deletes = [a for a in actions if isinstance(a, Delete) and a.session_id not in busy]
    pending = start_creates(creates, by_id)
    pending += [(driver_calls.submit(a.session_id, get_driver().delete, a.session_id), a) for a in deletes]
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
                    bind_instance(session_id, ref, recovered=True)
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
                    pending.append((driver_calls.submit(session_id, get_driver().delete, session_id), Delete(session_id)))
                    agent_calls.extend(unregistrations(by_id[session_id].node, ref))
    # The late answers, progress notes, the labs that came up and those whose instance is gone,
    # each kind in one transaction.
    bind_created(late)
    sessions_note(notes, state=SessionState.STARTING)
    report.running += len(sessions_transition(running, to=SessionState.RUNNING, only_from={SessionState.STARTING}))
    finished = _finish(finishing, agent_calls)
    report.finished += finished
    freed = freed or finished > 0
    agent_calls.extend(registrations(bound))
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
    driver_calls.pace_share()
    created: dict[str, str] = {}
    with events_batch():
        for future, action in answers:
            if future in done:
                _collect(future, action, report, created)
            else:
                report.in_flight += 1
        bind_created(created)
    agent_calls.extend(registrations(list(created)))
    _simulated_selftests(list(created))


def _moment(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)


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
        lease_holder="",  # a back-off, nobody's lease: it ends on time whoever lives
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
    stopping = LabSession.objects.filter(pk__one_of=session_ids, state=SessionState.STOPPING)
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
