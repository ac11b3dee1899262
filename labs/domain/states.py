"""The lab session state machine, the one place transitions are decided.

    queued -> admitted -> starting -> running -> stopping -> stopped
                                                          -> failed
                          starting <- running  (its node restarted: the lab is started again)

A session that may own cluster resources (starting, running) never jumps to a terminal state:
it goes through ``stopping`` so the driver deletes what it made before the allocation is
released. ``queued`` and ``admitted`` own nothing in the cluster yet and may end directly.
"""

from __future__ import annotations

from enum import StrEnum


class SessionState(StrEnum):
    QUEUED = "queued"
    ADMITTED = "admitted"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


TRANSITIONS: dict[SessionState, frozenset[SessionState]] = {
    SessionState.QUEUED: frozenset({SessionState.ADMITTED, SessionState.STOPPED, SessionState.FAILED}),
    SessionState.ADMITTED: frozenset({SessionState.STARTING, SessionState.STOPPING, SessionState.STOPPED, SessionState.FAILED}),
    SessionState.STARTING: frozenset({SessionState.RUNNING, SessionState.STOPPING}),
    # Back to starting when its node restarted and the lab is started again on its allocation.
    SessionState.RUNNING: frozenset({SessionState.STARTING, SessionState.STOPPING}),
    SessionState.STOPPING: frozenset({SessionState.STOPPED, SessionState.FAILED}),
    SessionState.STOPPED: frozenset(),
    SessionState.FAILED: frozenset(),
}

TERMINAL = frozenset({SessionState.STOPPED, SessionState.FAILED})
# States in which the session holds an Allocation row that has not been released.
HOLDS_ALLOCATION = frozenset({SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING, SessionState.STOPPING})
# The reasons a policy stops a session for (counted in npu_lab_policy_stops_total).
POLICY_STOPS = ("session.lifetime", "session.idle_culled", "session.budget_stopped", "session.reclaimed")
# What a reclaim warns and stops (a stopping session frees its room by itself).
RECLAIMABLE = frozenset({SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING})
# States that count against a student's concurrent-session limit.
ACTIVE = frozenset(set(SessionState) - TERMINAL)
# The only moves that can take a session out of its course's queue (an admission, or an end
# before one): the sessions queued behind it move up a place.
LEAVES_QUEUE = frozenset({SessionState.ADMITTED, *TERMINAL})


class InvalidTransition(ValueError):
    def __init__(self, current: SessionState, target: SessionState) -> None:
        super().__init__(f"a {current} session cannot become {target}")
        self.current = current
        self.target = target


def check_transition(current: str, target: str) -> None:
    """Raise ``InvalidTransition`` unless ``current -> target`` is an edge of the machine."""
    current_state, target_state = SessionState(current), SessionState(target)
    if target_state not in TRANSITIONS[current_state]:
        raise InvalidTransition(current_state, target_state)


def sources_of(target: str) -> frozenset[SessionState]:
    """Every state from which ``target`` may be reached (for conditional UPDATEs)."""
    target_state = SessionState(target)
    return frozenset(s for s, targets in TRANSITIONS.items() if target_state in targets)
