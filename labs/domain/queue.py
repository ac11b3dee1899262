"""How long a queued session may wait: an estimate a page can show, or none.

The estimate is made only where the portal knows what a queued session waits for: its course's
quota is full (a ``quota.instances`` / ``quota.core`` / ``quota.memory`` reason). Then room comes
back when the course's own sessions end, and each session holding part of the quota ends at
the latest at ``release_at``: a running one at its deadline (the length the controller
enforces), an admitted or starting one its full length from now, a stopping one now. The
session at queue position *p* gets the room of the *p*-th release, so its wait is the time
until then. It assumes one release makes room for one queued session (true when the course's
sessions are the same size, the usual lab) and it is an upper estimate: students who stop
early shorten it. Any other wait (cards full, borrowing limits, not yet looked at), or fewer
known releases than sessions ahead, gives no estimate (``None``) rather than a guess.
"""

from __future__ import annotations

from collections.abc import Iterable

from labs.domain.lifecycle import session_deadline
from labs.domain.states import HOLDS_ALLOCATION, SessionState

# Reasons that say the course's own guarantee is what a queued session waits for.
QUOTA_BOUND_CODES = frozenset({"quota.instances", "quota.core", "quota.memory"})


def release_at(state: SessionState | str, *, running_at: float | None, limit_minutes: int | None, now: float) -> float | None:
    """When a session holding part of its course's quota gives it back at the latest (seconds since the epoch).

    ``None`` when it has no length limit (it may hold the quota for ever). Raises ``ValueError``
    for a state that holds no quota (queued or ended).
    """
    state = SessionState(state)
    if state not in HOLDS_ALLOCATION:
        raise ValueError(f"a {state} session holds no quota to release")
    if state == SessionState.STOPPING:
        return now
    if state == SessionState.RUNNING:
        return session_deadline(running_at, limit_minutes)
    # Admitted or starting: its clock starts only when it runs.
    return now + 60 * limit_minutes if limit_minutes else None


def wait_estimate_seconds(*, position: int, reason_code: str, releases: Iterable[float | None], now: float) -> int | None:
    """Seconds until the session at queue ``position`` (1-based) is likely admitted; see the module docstring.

    ``releases`` are the ``release_at`` times of every session of the course that holds quota
    (``None`` entries, sessions without a limit, are never counted). Returns ``None`` unless
    ``reason_code`` says the course's quota is full and at least ``position`` releases are known;
    never negative.
    """
    if not isinstance(position, int) or isinstance(position, bool) or position < 1:
        raise ValueError(f"queue position must be an integer >= 1, not {position!r}")
    if reason_code not in QUOTA_BOUND_CODES:
        return None
    known = sorted(t for t in releases if t is not None)
    if len(known) < position:
        return None
    return max(0, round(known[position - 1] - now))
