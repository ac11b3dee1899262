"""What the lifecycle controller does with each session: desired state against observed state.

``decide`` is the controller's whole judgement, as a pure function (no Django, no driver): it
takes every open session as the ledger has it (``Desired``), every instance the cluster driver
reports (``Seen``, by session id, or ``None`` when the driver could not be read) and the time,
and returns the actions that make the two agree. ``labs.services.controller`` carries them out.

Per session, by ledger state:

- ``admitted``: ``Create`` (the executor moves it to starting first, then asks the driver).
- ``starting``: no instance and none recorded: ``Create`` again once its retry time has come
  (a create that failed, or a worker that died before asking); an instance: ``Bind`` its
  reference if the ledger does not have it, then ``Running`` / ``Fail`` / ``Note`` from its
  phase; an instance recorded but no longer there: ``Fail`` (vanished). The spawn deadline is
  checked only after the observation: a lab that is up is never failed for being late.
  Restarts while starting are normal (the CCE FlexNPU guide: when many instances are created
  at once a pod may restart briefly while its resources initialise): a pending instance that
  restarted is noted "restarting while the NPU initialises (n of limit)" and failed only once
  it restarted more than ``Timing.start_restarts`` times (or at the spawn deadline).
- ``running``: gone or failed: ``Fail``; past its maximum length: ``Expire`` (a normal stop);
  restarted more often than the ledger has recorded: ``Restarted`` (the student reads why; the
  session keeps running while the platform brings the lab back).
- ``stopping``: the instance is gone: ``Finish`` (stopped or failed, allocation released); still
  there and not being deleted: ``Delete``; being deleted for too long: ``Delete`` again, noted;
  still there but never recorded (a create whose run died before its bind): ``Bind`` it too.
- any instance whose card differs from the ledger's: ``Rebind`` to the card the node reports.

A node that restarted (``NodeReboot``: its boot id changed). The CCE FlexNPU guide: "节点意外重启后，
NPU虚拟化Pod可能因NPU虚拟化资源上报延迟，显示为"执行失败"状态。此为正常现象，可忽略该状态" (after an
unexpected restart of a node, its NPU pods may show failed because the NPU resources are reported
late; this is normal and the status may be ignored). So for ``Timing.reboot_device_wait_seconds``
after the restart was seen, a starting or running session on that node whose instance failed is
not failed for it: while the node has not reported its NPUs again it is noted "waiting for the
NPU to come back after a node restart" (``RebootWait``); once it has (and
``reboot_settle_seconds`` more, for an instance coming back by itself), the lab is started again
on the same allocation (``Relaunch``: the failed instance deleted, the session starting, its
place and card kept), and an instance that comes back by itself is watched again, the student
told (``Note`` / ``Restarted``: "the node restarted; your lab was restarted"). Past the bound,
a session still caught in the restart fails with ``session.node_restart_no_npu``. A relaunched
session creates its new instance only once the one it replaces (``replaced_ref``) is gone.

Instances that no open session owns: ``Delete`` (orphans). When the driver could not be read,
only ledger-side actions are taken (creates whose retry time has come); nothing is concluded
from an absence that was never observed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from labs.domain.reasons import Reason
from labs.domain.states import SessionState


@dataclass(frozen=True, slots=True)
class Desired:
    """An open session as the ledger has it. Times are seconds since the epoch."""

    session_id: str
    state: SessionState
    driver_ref: str = ""
    reason: Reason | None = None
    started_at: float | None = None
    stopping_at: float | None = None
    create_attempts: int = 0
    retry_at: float | None = None
    node: str = ""
    card_index: int | None = None
    # A running session ends at ``expires_at`` (its template's or course's maximum length).
    expires_at: float | None = None
    lifetime_minutes: int = 0
    # The restarts of its instance the ledger has recorded (those seen when it came up, and since).
    restarts: int = 0
    # The latest restart of its node (``None``: none seen), the restart the session was caught in
    # (its ``at``; ``None``: none), and the instance a relaunch replaces (empty: none).
    node_reboot: NodeReboot | None = None
    reboot_at: float | None = None
    replaced_ref: str = ""


@dataclass(frozen=True, slots=True)
class NodeReboot:
    """A node's restart as the portal saw it: when its new boot was first seen (``at``) and when
    its NPUs were reported again since (``devices_at``; ``None``: not yet). Seconds since the epoch."""

    at: float
    devices_at: float | None = None


@dataclass(frozen=True, slots=True)
class Seen:
    """An instance as the driver reports it (a copy of ``labs.drivers.Observed`` without Django)."""

    session_id: str
    phase: str  # "pending" | "running" | "failed"
    ref: str = ""
    reason: Reason | None = None  # the driver's: how far a start got, why it failed
    access_url: str = ""
    node: str = ""
    card_index: int | None = None
    deleting: bool = False
    # How many times the lab ended and was, or is about to be, started again by the platform,
    # and why it ended the last time (``None``: the platform does not say).
    restarts: int = 0
    last_exit: Reason | None = None


@dataclass(frozen=True, slots=True)
class Timing:
    """The controller's bounds: seconds to start and to stop, and restarts allowed while starting."""

    spawn_timeout_seconds: float = 300.0
    stop_timeout_seconds: float = 120.0
    start_restarts: int = 3
    # How long after a node restart its sessions wait for the node's NPUs (``LAB_REBOOT_DEVICE_WAIT``),
    # and how long after the NPUs are back a lab still failed is left to come back by itself before
    # it is started again: a kubelet admits its pods as the device plugin registers, and the pods'
    # new status may reach the portal's look after the node's.
    reboot_device_wait_seconds: float = 300.0
    reboot_settle_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.start_restarts, int) or isinstance(self.start_restarts, bool) or self.start_restarts < 0:
            raise ValueError(f"Timing.start_restarts must be a non-negative int, not {self.start_restarts!r}")
        for name in ("reboot_device_wait_seconds", "reboot_settle_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"Timing.{name} must be a non-negative number, not {value!r}")


class Create(NamedTuple):
    session_id: str


class Bind(NamedTuple):
    session_id: str
    ref: str


class Running(NamedTuple):
    session_id: str
    access_url: str
    restarts: int = 0  # while it started: recorded, so that only later ones count as a running lab's
    reason: Reason | None = None  # what the student reads once it runs (``None``: nothing)


class Fail(NamedTuple):
    session_id: str
    reason: Reason


class Note(NamedTuple):
    session_id: str
    reason: Reason


class Delete(NamedTuple):
    session_id: str
    orphan: bool = False


class Finish(NamedTuple):
    session_id: str


class Rebind(NamedTuple):
    session_id: str
    node: str
    card_index: int


class Expire(NamedTuple):
    session_id: str
    minutes: int


class Restarted(NamedTuple):
    """A running lab restarted: record ``restarts`` and tell the student ``reason``."""

    session_id: str
    restarts: int
    reason: Reason


class RebootWait(NamedTuple):
    """The session's node restarted and has not reported its NPUs again: the session, in ``state``,
    is caught in the restart seen at ``reboot_at`` and waits (``reason``), not failed."""

    session_id: str
    state: SessionState
    reboot_at: float
    reason: Reason


class Relaunch(NamedTuple):
    """The node restarted and reports its NPUs again, but the lab's instance (``ref``) stays failed:
    start the lab again on the same allocation (the session goes back to starting, ``ref`` deleted)."""

    session_id: str
    ref: str
    reboot_at: float


Action = Create | Bind | Running | Fail | Note | Delete | Finish | Rebind | Expire | Restarted | RebootWait | Relaunch

REBOOT_WAITING = Reason.of("session.node_restart_waiting")
REBOOT_RELAUNCHING = Reason.of("session.node_restart_relaunching")
REBOOT_RESTARTED = Reason.of("session.node_restarted")


def session_limit_minutes(template_minutes: int | None, course_minutes: int | None, extended_minutes: int = 0) -> int | None:
    """A session's maximum length in minutes: the shorter of its template's and its course's, plus
    the extensions the student took (``extended_minutes`` in all).

    ``None`` (no limit) when neither sets one, e.g. a course without a quota. This is the limit
    the controller enforces (``Expire``) and the one pages count down to.
    """
    limits = [m for m in (template_minutes, course_minutes) if m]
    return min(limits) + extended_minutes if limits else None


def session_deadline(running_at: float | None, limit_minutes: int | None) -> float | None:
    """When a running session is stopped for its length, in seconds since the epoch.

    The limit counts from when the session came up (``running_at``), not from its launch: time
    spent queued or starting is not taken from it. ``None`` before it runs or without a limit.
    """
    if running_at is None or not limit_minutes:
        return None
    return running_at + 60 * limit_minutes


def decide(
    sessions: Sequence[Desired], seen: Mapping[str, Seen] | None, *, now: float, timing: Timing = Timing()
) -> list[Action]:
    """The actions that bring the cluster and the ledger into agreement; see the module docstring."""
    actions: list[Action] = []
    observed = seen is not None
    seen = seen or {}
    for session in sessions:
        instance = seen.get(session.session_id)
        if observed and instance is not None:
            _check_card(session, instance, actions)
        if observed and _node_restarted(session, instance, now, timing, actions):
            continue
        match session.state:
            case SessionState.ADMITTED:
                actions.append(Create(session.session_id))
            case SessionState.STARTING:
                _starting(session, instance, observed, now, timing, actions)
            case SessionState.RUNNING if observed:
                _running(session, instance, now, actions)
            case SessionState.STOPPING if observed:
                _stopping(session, instance, now, timing, actions)
    if observed:
        owned = {s.session_id for s in sessions}
        orphans = (sid for sid, instance in sorted(seen.items()) if sid not in owned and not instance.deleting)
        actions.extend(Delete(sid, orphan=True) for sid in orphans)
    return actions


def _node_restarted(session: Desired, instance: Seen | None, now: float, timing: Timing, actions: list[Action]) -> bool:
    """A starting or running session's part in its node's restart; whether that settles it this round.

    Only a failed instance (the vendor's "执行失败" after a restart) or a session already caught in
    the restart is concerned; any other failure is judged as always. See the module docstring.
    """
    reboot = session.node_reboot
    if reboot is None or session.state not in (SessionState.STARTING, SessionState.RUNNING):
        return False
    sid = session.session_id
    # Within a millisecond: the times went through the database's timestamps and back.
    caught = session.reboot_at is not None and abs(session.reboot_at - reboot.at) < 0.001
    # On the node when it restarted (started before the restart was seen), or caught in it already.
    concerned = caught or (session.started_at is not None and session.started_at <= reboot.at)
    failed = (
        instance is not None
        and instance.phase == "failed"
        and not instance.deleting
        and (not session.replaced_ref or instance.ref != session.replaced_ref)  # the replaced one: ``_starting``
    )
    if failed and instance is not None and concerned:
        if now - reboot.at > timing.reboot_device_wait_seconds:
            if not caught or reboot.devices_at is not None:
                return False  # not the restart's, or its NPUs came back: judged as any failure
            seconds = round(timing.reboot_device_wait_seconds)
            actions.append(Fail(sid, Reason.of("session.node_restart_no_npu", seconds=seconds)))
        elif reboot.devices_at is None or now - reboot.devices_at < timing.reboot_settle_seconds:
            if not caught or session.reason != REBOOT_WAITING:
                actions.append(RebootWait(sid, session.state, reboot.at, REBOOT_WAITING))
        else:
            actions.append(Relaunch(sid, instance.ref or session.driver_ref, reboot.at))
        return True
    if caught and instance is not None and session.state == SessionState.RUNNING and session.reason == REBOOT_WAITING:
        if instance.phase == "running":
            # It came back by itself on the same allocation: watched again, its restart recorded.
            actions.append(Restarted(sid, max(instance.restarts, session.restarts), REBOOT_RESTARTED))
        return True  # still coming back (pending): the student keeps reading that it waits
    return False


def _starting(session: Desired, instance: Seen | None, observed: bool, now: float, timing: Timing, actions: list[Action]) -> None:
    sid = session.session_id
    if session.replaced_ref and not session.driver_ref:
        # A relaunch after a node restart: the new instance is made once the old one is seen gone
        # (on Kubernetes they share the pod's name, and a create would find the old pod).
        if not observed:
            return
        if instance is not None and instance.ref == session.replaced_ref:
            if not instance.deleting:
                actions.append(Delete(sid))
            return
    if instance is None:
        if session.driver_ref and observed:
            actions.append(Fail(sid, Reason.of("session.vanished_before_start")))
        elif not session.driver_ref and (session.retry_at is None or session.retry_at <= now):
            actions.append(Create(sid))
        return
    if instance.ref and instance.ref != session.driver_ref:
        actions.append(Bind(sid, instance.ref))
    if instance.deleting:
        actions.append(Fail(sid, Reason.of("session.vanished_before_start")))
    elif instance.phase == "running":
        said = REBOOT_RESTARTED if session.replaced_ref or session.reboot_at is not None else None
        actions.append(Running(sid, instance.access_url, instance.restarts, said))
    elif instance.phase == "failed":
        actions.append(Fail(sid, _driver_reason(instance, "session.vanished_before_start")))
    elif instance.restarts > timing.start_restarts:
        cause = instance.last_exit or instance.reason or Reason.of("driver.pod_failed")
        limit = timing.start_restarts
        reason = Reason.of("session.start_restarts_exceeded", restarts=instance.restarts, limit=limit, cause=cause)
        actions.append(Fail(sid, _clipped(reason)))
    elif session.started_at is not None and now - session.started_at > timing.spawn_timeout_seconds:
        actions.append(Fail(sid, Reason.of("session.spawn_timeout", seconds=round(timing.spawn_timeout_seconds))))
    else:
        if instance.restarts:
            reason = Reason.of("session.start_restarting", restart=instance.restarts, limit=timing.start_restarts)
        else:
            reason = _driver_reason(instance, "session.starting")
        if reason != session.reason:
            actions.append(Note(sid, reason))


# Why a platform took an instance away that the driver can tell (else: "vanished").
DELETION_CAUSES = frozenset({"driver.node_lost"})


def _running(session: Desired, instance: Seen | None, now: float, actions: list[Action]) -> None:
    if instance is not None and instance.deleting and instance.reason is not None and instance.reason.code in DELETION_CAUSES:
        actions.append(Fail(session.session_id, _clipped(instance.reason)))
    elif instance is None or instance.deleting:
        actions.append(Fail(session.session_id, Reason.of("session.vanished")))
    elif instance.phase == "failed":
        actions.append(Fail(session.session_id, _driver_reason(instance, "session.vanished")))
    elif session.expires_at is not None and now >= session.expires_at:
        actions.append(Expire(session.session_id, session.lifetime_minutes))
    elif instance.restarts > session.restarts:
        if instance.last_exit is not None:
            reason = Reason.of("session.restarted", cause=_clipped(instance.last_exit), restarts=instance.restarts)
        else:
            reason = Reason.of("session.restarted_unknown", restarts=instance.restarts)
        actions.append(Restarted(session.session_id, instance.restarts, reason))


def _stopping(session: Desired, instance: Seen | None, now: float, timing: Timing, actions: list[Action]) -> None:
    if instance is None:
        actions.append(Finish(session.session_id))
        return
    if instance.ref and not session.driver_ref:
        # The run that created it died before recording it, and the stop came first: the
        # instance, found by the session's own id, is recorded before it goes, so that the
        # stop's end removes its registration from the node.
        actions.append(Bind(session.session_id, instance.ref))
    if not instance.deleting:
        actions.append(Delete(session.session_id))
    elif session.stopping_at is not None and now - session.stopping_at > timing.stop_timeout_seconds:
        # The platform accepted the deletion but the pod lingers: ask again, keep the share
        # booked (releasing it while the instance may still hold the card would double-book).
        actions.append(Delete(session.session_id))


def _check_card(session: Desired, instance: Seen, actions: list[Action]) -> None:
    if instance.card_index is None or session.card_index is None:
        return
    node = instance.node or session.node
    if (node, instance.card_index) != (session.node, session.card_index):
        actions.append(Rebind(session.session_id, node, instance.card_index))


DRIVER_TEXT_MAX_CHARS = 300  # of each of the platform's own words a driver's reason carries


def _driver_reason(instance: Seen, fallback: str) -> Reason:
    """The driver's reason for the instance (its platform's words cut short), or ``fallback`` without one."""
    return _clipped(instance.reason) if instance.reason is not None else Reason.of(fallback)


def _clipped(reason: Reason) -> Reason:
    """``reason`` with each of its texts (the platform's words) cut to ``DRIVER_TEXT_MAX_CHARS``."""
    params: dict[str, int | str | Reason] = {}
    for name, value in reason.params:
        if isinstance(value, Reason):
            value = _clipped(value)
        elif isinstance(value, str):
            value = value[:DRIVER_TEXT_MAX_CHARS]
        params[name] = value
    return Reason.of(reason.code, **params)
