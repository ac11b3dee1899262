"""Fair order in the queue (Kueue's admission fair sharing, done as virtual time).

Inside a course, a student who used less NPU time recently goes first: a launch's place in the
course's queue (``queue_at``) is its launch time pushed back by the student's recent usage,
decayed with a half-life. The push is finite, so a heavy user waits longer but never forever.

Across the courses of one cohort, which share idle quota, the course using the smaller part of
its own guarantee (its dominant share: the largest of AI Core, memory and instances held over
guaranteed) goes first. Courses outside any cohort keep their places.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


def decayed(amount: float, age_seconds: float, half_life_seconds: float) -> float:
    """``amount`` used ``age_seconds`` ago, as it counts now."""
    if half_life_seconds <= 0:
        return 0.0
    return amount * 0.5 ** (max(0.0, age_seconds) / half_life_seconds)


def queue_delay_seconds(recent_core_percent_hours: float, *, seconds_per_percent_hour: float, max_seconds: float) -> float:
    """How far back in its course's queue a launch goes for the student's decayed recent usage."""
    return min(max_seconds, max(0.0, recent_core_percent_hours) * seconds_per_percent_hour)


def dominant_share(held: Sequence[float], guaranteed: Sequence[float]) -> float:
    """The largest share of a guarantee in use; a resource guaranteed as 0 counts as fully used once any is held."""
    shares = [h / g if g > 0 else (float("inf") if h > 0 else 0.0) for h, g in zip(held, guaranteed, strict=True)]
    return max(shares, default=0.0)


@dataclass(frozen=True)
class Waiting:
    key: str
    course_id: int
    cohort: str  # "" for none


def cohort_fair_order(waiting: Sequence[Waiting], shares: dict[int, float]) -> list[str]:
    """``waiting`` (in queue order) with each cohort's requests reordered among the places they
    hold: lower dominant share first, queue order within a course and among equal shares."""
    slots: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(waiting):
        if w.cohort:
            slots[w.cohort].append(i)
    order = [w.key for w in waiting]
    for places in slots.values():
        members = [waiting[i] for i in places]
        ranked = sorted(range(len(members)), key=lambda j: (shares.get(members[j].course_id, 0.0), j))
        for place, j in zip(places, ranked, strict=True):
            order[place] = members[j].key
    return order
