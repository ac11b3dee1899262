"""The compute-share model: how much of one card's AI Core each instance on it gets right now.

Every instance on a card has a floor (``floor_percent``, its ``flexnpu-core.percentage``) and a
momentary demand (``demand_percent``, what it would use if it had the whole card). Capacity is
100 (percent of one card's AI Core) and amounts are integers. The policy (openFuyao's names)
decides how the card is shared:

- ``fixed-share`` gets ``min(demand, floor)`` and never more, even on an idle card;
- ``elastic`` (FlexNPU's behaviour) is guaranteed ``min(demand, floor)`` first; then the idle
  compute, 100 minus everything handed out, is lent to elastic instances that want more, in
  proportion to their floors, never beyond an instance's demand (water-filling: what a capped
  instance does not take goes to the others);
- ``best-effort`` has no floor: it gets what elastic instances leave, split equally among the
  best-effort instances, never beyond an instance's demand.

Reference example (CCE FlexNPU sharing practice): A and B are elastic with floors 25 % and 75 %.
A alone busy (demand 100, B demand 0): A gets 100 — a small floor does not confine an instance
on an idle card. Both busy (demand 100 each): A gets 25 and B 75 — each at least its floor::

    >>> delivered_shares([ShareDemand("A", 25, 100, "elastic"), ShareDemand("B", 75, 0, "elastic")])
    {'A': 100, 'B': 0}
    >>> delivered_shares([ShareDemand("A", 25, 100, "elastic"), ShareDemand("B", 75, 100, "elastic")])
    {'A': 25, 'B': 75}

Invariants: the sum delivered is at most 100; nobody gets more than its demand; when the floors
of fixed-share and elastic instances sum to at most 100 (the placement invariant), each of them
gets at least ``min(demand, floor)``; compute stays idle only when no elastic or best-effort
instance wants more. Deterministic: a unit that integer division cannot split goes to the
instances in key order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

CARD_CORE_PERCENT = 100
POLICIES = ("fixed-share", "elastic", "best-effort")

Policy = Literal["fixed-share", "elastic", "best-effort"]


class ShareDemand(NamedTuple):
    """One instance on a card: its floor and what it asks for now, in percent of the card's AI Core.

    ``floor_percent`` is 1..100 for fixed-share and elastic, ignored (no floor) for best-effort;
    ``demand_percent`` is 0..100 (0: idle). ``key`` identifies the instance (an entity-id).
    """

    key: str
    floor_percent: int
    demand_percent: int
    policy: Policy = "elastic"


def delivered_shares(instances: Sequence[ShareDemand]) -> dict[str, int]:
    """The AI Core percent each instance gets, keyed by ``key``, in input order (module docstring).

    Raises ``ValueError`` on a duplicate key, an unknown policy or an amount out of range.
    """
    _validate(instances)
    delivered = {i.key: 0 for i in instances}
    floored = [i for i in instances if i.policy != "best-effort"]

    # Guarantees first. If floors were ever overcommitted (> 100 in all), they shrink in
    # proportion to the floors rather than breaking the card's capacity.
    guaranteed = _water_fill(
        CARD_CORE_PERCENT,
        weights={i.key: i.floor_percent for i in floored},
        caps={i.key: min(i.demand_percent, i.floor_percent) for i in floored},
    )
    _add(delivered, guaranteed)

    elastic = [i for i in instances if i.policy == "elastic"]
    lent = _water_fill(
        CARD_CORE_PERCENT - sum(delivered.values()),
        weights={i.key: i.floor_percent for i in elastic},
        caps={i.key: i.demand_percent - delivered[i.key] for i in elastic},
    )
    _add(delivered, lent)

    best_effort = [i for i in instances if i.policy == "best-effort"]
    leftovers = _water_fill(
        CARD_CORE_PERCENT - sum(delivered.values()),
        weights={i.key: 1 for i in best_effort},
        caps={i.key: i.demand_percent for i in best_effort},
    )
    _add(delivered, leftovers)
    return delivered


def _water_fill(capacity: int, weights: Mapping[str, int], caps: Mapping[str, int]) -> dict[str, int]:
    """Split ``capacity`` in proportion to ``weights``, nobody beyond its cap; integer units.

    Repeatedly: whoever's proportional share reaches its remaining cap is filled to the cap and
    leaves, and the rest is split again among the others. When nobody is capped any more, each
    gets its rounded-down share and the units left over go one each in key order (fewer units
    are left than instances, and an uncapped instance has room for one more).
    """
    given = {key: 0 for key in weights}
    active = sorted(key for key in weights if caps[key] > 0 and weights[key] > 0)
    while capacity > 0 and active:
        total_weight = sum(weights[key] for key in active)
        share = {key: capacity * weights[key] // total_weight for key in active}
        capped = [key for key in active if share[key] >= caps[key] - given[key]]
        if capped:
            for key in capped:
                capacity -= caps[key] - given[key]
                given[key] = caps[key]
            active = [key for key in active if key not in capped]
            continue
        for key in active:
            given[key] += share[key]
            capacity -= share[key]
        for key in active[:capacity]:
            given[key] += 1
        break
    return given


def _add(delivered: dict[str, int], extra: Mapping[str, int]) -> None:
    for key, amount in extra.items():
        delivered[key] += amount


def _validate(instances: Sequence[ShareDemand]) -> None:
    seen: set[str] = set()
    for i in instances:
        if i.key in seen:
            raise ValueError(f"instance {i.key!r} is listed twice")
        seen.add(i.key)
        if i.policy not in POLICIES:
            raise ValueError(f"instance {i.key!r}: unknown policy {i.policy!r} (expected one of {', '.join(POLICIES)})")
        if not 0 <= i.demand_percent <= CARD_CORE_PERCENT:
            raise ValueError(f"instance {i.key!r}: demand {i.demand_percent} % is outside 0..100")
        if i.policy != "best-effort" and not 1 <= i.floor_percent <= CARD_CORE_PERCENT:
            raise ValueError(f"instance {i.key!r}: {i.policy} floor {i.floor_percent} % is outside 1..100")
