"""Which borrowed sessions of other courses to take back so that a request fits."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from labs.domain.placement.model import LaunchRequest, ReclaimPlan
from labs.domain.placement.state import (
    _DEV_CARD_CAP,
    _DEV_NODE_CAP,
    _INF_CARD_CAP,
    _INF_NODE_CAP,
    _Card,
    _matches,
    _Placement,
    _shape,
)
from labs.domain.units import CORE_PERCENT_MAX, Scenario


class ReclaimMixin:
    """``Cluster``'s reclaim plans; mixed into ``Cluster``, whose state it reads."""

    def reclaim_plan(
        self, request: LaunchRequest, candidates: Iterable[str], preferred: Collection[str] = ()
    ) -> ReclaimPlan | None:
        """The fewest ``candidates`` whose removal lets ``request`` fit, or ``None`` if none can.

        ``candidates`` are the keys that may be taken (borrowed, old enough); ``preferred`` ones
        (already warned) are taken before the others, so a plan made again names the same
        victims. For a request on part of a card, victims are taken preferred, then newest,
        first on each card; among cards the one needing the fewest wins, then the one needing
        the fewest not preferred, ties by node order then card index. For a whole-card request,
        see ``_whole_card_reclaim_plan``. The plan never counts on capacity the request could
        not use (unhealthy cards, unavailable or unmatched nodes, node instance caps).
        """
        core, memory, inference, cards, cpu, host_mib = _shape(request)
        if cards > 1:
            return self._whole_card_reclaim_plan(request, candidates, preferred)
        by_card: dict[int, list[tuple[float, str, _Placement]]] = {}
        cards_with_victims: dict[int, _Card] = {}
        for key in candidates:
            placement = self._placements.get(key)
            if placement is None or placement.whole:
                continue
            card = placement.cards[0]
            by_card.setdefault(id(card), []).append((placement.started_at, key, placement))
            cards_with_victims[id(card)] = card
        best: tuple[int, int, int, int] | None = None
        plan: ReclaimPlan | None = None
        for card in sorted(cards_with_victims.values(), key=lambda c: (c.node.order, c.index)):
            node = card.node
            if not node.available or memory % node.granule:
                continue
            if request.node_selector and not _matches(node, request.node_selector):
                continue
            if not card.healthy or (request.die_id and card.die_id != request.die_id):
                continue
            victims = sorted(by_card[id(card)], key=lambda v: (v[1] not in preferred, -v[0], v[1]))
            core_used, memory_used, count, inf = card.core_used, card.memory_used, card.count, card.inference
            node_count, node_inf = node.count, node.inference
            cpu_used, host_used = node.cpu_used, node.host_mib_used
            chosen: list[str] = []
            for _, key, victim in [(None, None, None), *victims]:
                if victim is not None:
                    chosen.append(key)
                    core_used -= victim.core_percent
                    memory_used -= victim.memory_mib
                    count -= 1
                    node_count -= 1
                    cpu_used -= victim.cpu_millicores
                    host_used -= victim.host_memory_mib
                    if victim.scenario == Scenario.INFERENCE:
                        inf -= 1
                        node_inf -= 1
                card_cap = _INF_CARD_CAP if inference or inf else _DEV_CARD_CAP
                node_cap = _INF_NODE_CAP if inference or node_inf else _DEV_NODE_CAP
                if (
                    core_used + core <= CORE_PERCENT_MAX
                    and memory_used + memory <= card.memory_mib
                    and count < card_cap
                    and node_count < node_cap
                    and (node.cpu_total is None or cpu_used + cpu <= node.cpu_total)
                    and (node.host_mib_total is None or host_used + host_mib <= node.host_mib_total)
                ):
                    rank = (len(chosen), sum(key not in preferred for key in chosen), node.order, card.index)
                    if chosen and (best is None or rank < best):
                        best, plan = rank, ReclaimPlan(tuple(chosen), node.name, card.index, (card.index,))
                    break
        return plan

    def _whole_card_reclaim_plan(
        self, request: LaunchRequest, candidates: Iterable[str], preferred: Collection[str]
    ) -> ReclaimPlan | None:
        """Victims whose removal leaves ``request.cards`` whole, empty cards on one node.

        A card can be emptied when every instance on it is a candidate (a whole-card victim
        empties all of its cards). On each node the cards needing the fewest further victims are
        taken first (ties by card index); among nodes the one needing the fewest victims wins,
        then the fewest not ``preferred``, ties by node order. Victims are listed newest first.
        """
        _, memory, inference, cards, cpu, host_mib = _shape(request)
        eligible: dict[str, _Placement] = {}
        on_card: dict[int, set[str]] = {}
        for key in candidates:
            placement = self._placements.get(key)
            if placement is None:
                continue
            eligible[key] = placement
            for card in placement.cards:
                on_card.setdefault(id(card), set()).add(key)
        best: tuple[int, int, int] | None = None
        plan: ReclaimPlan | None = None
        for node in self.nodes:
            if not node.available or memory % node.granule:
                continue
            if request.node_selector and not _matches(node, request.node_selector):
                continue
            freeable: list[tuple[_Card, set[str]]] = []
            for card in node.cards:
                keys = on_card.get(id(card), set())
                if card.healthy and card.memory_mib >= memory and len(keys) == card.count and not card.unlisted:
                    freeable.append((card, keys))
            if len(freeable) < cards:
                continue
            chosen: set[str] = set()
            taken: list[_Card] = []
            while len(taken) < cards:
                position = min(range(len(freeable)), key=lambda i: (len(freeable[i][1] - chosen), freeable[i][0].index))
                card, keys = freeable.pop(position)
                taken.append(card)
                chosen |= keys
            if not chosen:
                continue  # the request fits here already: nothing to reclaim
            freed = sum(len(eligible[key].cards) for key in chosen)
            freed_inference = sum(len(eligible[key].cards) for key in chosen if eligible[key].scenario == Scenario.INFERENCE)
            cap = _INF_NODE_CAP if inference or node.inference > freed_inference else _DEV_NODE_CAP
            if node.count - freed + cards > cap:
                continue
            freed_cpu = sum(eligible[key].cpu_millicores for key in chosen)
            freed_mib = sum(eligible[key].host_memory_mib for key in chosen)
            if not node.host_fits(cpu - freed_cpu, host_mib - freed_mib):
                continue
            rank = (len(chosen), len(chosen - set(preferred)), node.order)
            if best is None or rank < best:
                victims = tuple(sorted(chosen, key=lambda key: (-eligible[key].started_at, key)))
                indices = tuple(sorted(card.index for card in taken))
                best, plan = rank, ReclaimPlan(victims, node.name, indices[0], indices)
        return plan
