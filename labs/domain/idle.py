"""When a running lab is idle: a pure judgement over what its signals report.

A lab is active when any signal says so: a kernel computing (browser or not), a terminal or a
request to the lab's own server (JupyterLab's ``last_activity``), a vLLM request running or
finished since the last look, the NPU doing work (AI Core in use, where the node reports it).
It is idle only when none has for the idle timeout. ``idle_verdict`` is what the portal does
about it at each look; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Activity:
    """What one look at a lab found. ``last_seen``: the latest activity the lab itself reports
    (seconds since the epoch), ``None`` when it reports none; ``busy_now``: working right now."""

    busy_now: bool = False
    last_seen: float | None = None


class Verdict(StrEnum):
    NONE = "none"  # active enough: nothing to do
    WARN = "warn"  # idle: warn the student, the lab stops at ``cull_at`` unless it is used
    CLEAR = "clear"  # warned, but used again since: withdraw the warning
    CULL = "cull"  # idle for the whole timeout: stop it


@dataclass(frozen=True)
class IdleDecision:
    verdict: Verdict
    last_active: float
    cull_at: float | None = None


def idle_verdict(
    *,
    last_active: float,
    activity: Activity,
    now: float,
    timeout_seconds: float,
    warning_seconds: float,
    cull_at: float | None,
) -> IdleDecision:
    """``last_active``: the latest activity known before this look (at first, when the lab came
    up); ``cull_at``: when a warning already given says the lab stops (``None``: not warned).

    A lab is due to stop ``timeout_seconds`` after its latest activity. The student is warned
    ``warning_seconds`` ahead, and always gets that long: a lab found past due unwarned (the
    portal was down, the check came late) is warned, not stopped. Used again after the warning,
    the warning goes; still unused at ``cull_at``, the lab stops.
    """
    seen = [last_active]
    if activity.last_seen is not None:
        seen.append(min(activity.last_seen, now))  # a lab's clock ahead of ours earns it nothing
    if activity.busy_now:
        seen.append(now)
    latest = max(seen)
    if cull_at is not None:
        if activity.busy_now or latest > last_active:
            return IdleDecision(Verdict.CLEAR, latest)
        if now >= cull_at:
            return IdleDecision(Verdict.CULL, latest, cull_at)
        return IdleDecision(Verdict.NONE, latest, cull_at)
    due = latest + timeout_seconds
    if due - now <= warning_seconds:
        return IdleDecision(Verdict.WARN, latest, max(due, now + warning_seconds))
    return IdleDecision(Verdict.NONE, latest)
