"""Why a request finds no room (a ``Reason`` with its numbers), and the capacity stranded on cards."""

from __future__ import annotations

from sortedcontainers import SortedList

from labs.domain.placement.model import FragmentationReport, LaunchRequest, StrandedCard
from labs.domain.placement.state import _DEV_CARD_CAP, _DEV_NODE_CAP, _INF_CARD_CAP, _INF_NODE_CAP, _matches, _Node, _shape
from labs.domain.reasons import Reason
from labs.domain.units import CORE_PERCENT_MAX


class ExplainMixin:
    """``Cluster``'s explanations of a miss and fragmentation report; mixed into ``Cluster``, whose state it reads."""

    def fragmentation(self) -> FragmentationReport:
        stranded = []
        for node in self.nodes:
            if not node.available:
                continue
            for card in node.cards:
                if not card.healthy:
                    continue
                free_core = CORE_PERCENT_MAX - card.core_used
                free_mib = card.memory_mib - card.memory_used
                if not free_core and not free_mib:
                    continue
                cap = _INF_CARD_CAP if card.inference else _DEV_CARD_CAP
                if card.count >= cap:
                    why = Reason.of("stranded.card_full", cap=cap)
                elif free_mib < node.granule:
                    why = Reason.of("stranded.memory_step", free_mib=free_mib, step_mib=node.granule)
                elif not node.has_room(False):
                    why = Reason.of("stranded.node_full")
                else:
                    continue
                stranded.append(StrandedCard(node.name, card.index, free_core, free_mib, why))
        return FragmentationReport(
            sum(s.free_core_percent for s in stranded), sum(s.free_memory_mib for s in stranded), tuple(stranded)
        )

    # --- explaining ---------------------------------------------------------------------------

    def explain(self, request: LaunchRequest) -> Reason:
        """Why ``choose`` found nothing: the binding constraint as a ``Reason`` with its numbers.

        Remembered per request shape until the next placement or release: when a full cluster
        meets a queue of a thousand launches, one scan explains them all.
        """
        key = (_shape(request), request.node_selector, request.die_id)
        cached = self._explained.get(key)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        reason = self._explain(request)
        self._explained[key] = (self._version, reason)
        return reason

    def _explain(self, request: LaunchRequest) -> Reason:
        core, memory, inference, cards, cpu, host_mib = _shape(request)
        if (
            cards == 1
            and not self._host_limited
            and not request.node_selector
            and not request.die_id
            and self._single_granule
            and self._healthy_available
            and memory % self.nodes[0].granule == 0
        ):
            return self._explain_from_summaries(core, memory, inference)
        if self._closed_for_maintenance(request, memory):
            return Reason.of("capacity.maintenance")
        nodes = [n for n in self.nodes if n.available]
        if request.node_selector:
            nodes = [n for n in nodes if _matches(n, request.node_selector)]
            if not nodes:
                wanted = ", ".join(f"{k}={v}" for k, v in request.node_selector)
                return Reason.of("node.selector", labels=wanted)
        if request.die_id:
            pinned = [(n, c) for n in nodes for c in n.cards if c.die_id == request.die_id]
            if not pinned:
                return Reason.of("card.pinned_missing", die_id=request.die_id)
            node, card = pinned[0]
            if not card.healthy:
                return Reason.of("card.pinned_unhealthy", die_id=request.die_id, node=node.name, card=card.index)
        granular = [n for n in nodes if memory % n.granule == 0]
        if nodes and not granular:
            step = min(n.granule for n in nodes)
            return Reason.of("memory.granularity", memory_mib=memory, step_mib=step)
        if request.die_id:
            has_usable = any(c.healthy and c.die_id == request.die_id for n in granular for c in n.cards)
        else:
            has_usable = any(n.healthy_cards for n in granular)
        if not has_usable:
            return Reason.of("capacity.no_healthy_card")
        open_nodes = [n for n in granular if n.has_room(inference, cards)]
        if not open_nodes:
            return _node_cap_reason(granular, inference, cards)
        host_open = [n for n in open_nodes if n.host_fits(cpu, host_mib)]
        if not host_open:
            return _host_reason(open_nodes, cpu, host_mib)
        open_nodes = host_open
        if cards > 1:
            node, free = max(
                ((n, sum(1 for c in n.cards if c.takes_whole(memory))) for n in open_nodes),
                key=lambda nf: (nf[1], -nf[0].order),
            )
            return Reason.of("whole_cards.free", cards=cards, free=free, node=node.name)
        # One pass, in node then card order, keeping the first of equal maxima; without a pinned
        # card each node's summary already holds its own first maxima.
        most_core = most_mib = -1
        core_at = mib_at = None
        if not request.die_id:
            cap = _INF_CARD_CAP if inference else _DEV_CARD_CAP
            for node in open_nodes:
                if node.summary is None:
                    node.summarise()
                core_card, mib_card = node.summary[cap]
                if core_card is not None and CORE_PERCENT_MAX - core_card.core_used > most_core:
                    most_core, core_at = CORE_PERCENT_MAX - core_card.core_used, (node, core_card)
                if mib_card is not None and mib_card.memory_mib - mib_card.memory_used > most_mib:
                    most_mib, mib_at = mib_card.memory_mib - mib_card.memory_used, (node, mib_card)
        for node in open_nodes if request.die_id else ():
            for card in node.cards:
                if not card.healthy or (request.die_id and card.die_id != request.die_id):
                    continue
                if card.count >= (_INF_CARD_CAP if inference or card.inference else _DEV_CARD_CAP):
                    continue
                free_core = CORE_PERCENT_MAX - card.core_used
                free_mib = card.memory_mib - card.memory_used
                if free_core > most_core:
                    most_core, core_at = free_core, (node, card)
                if free_mib > most_mib:
                    most_mib, mib_at = free_mib, (node, card)
        if core_at is None or mib_at is None:
            return _card_cap_reason(open_nodes, inference, request.die_id)
        if most_core < core:
            node, card = core_at
            return Reason.of("card.core", need_percent=core, best_free_percent=most_core, node=node.name, card=card.index)
        if most_mib < memory:
            node, card = mib_at
            return Reason.of("card.memory", need_mib=memory, best_free_mib=most_mib, node=node.name, card=card.index)
        return Reason.of("capacity.no_single_card", core_percent=core, memory_mib=memory)

    def _closed_for_maintenance(self, request: LaunchRequest, memory: int) -> bool:
        """Whether every node that could take ``request`` (its labels, its memory step, a healthy
        card, the pinned one) is drained for maintenance: what the student is told then, rather
        than the cards' numbers, is that the servers are closed."""
        could = [
            n
            for n in self.nodes
            if (not request.node_selector or _matches(n, request.node_selector))
            and memory % n.granule == 0
            and any(c.healthy and (not request.die_id or c.die_id == request.die_id) for c in n.cards)
        ]
        return bool(could) and all(n.maintenance for n in could)

    def _explain_from_summaries(self, core: int, memory: int, inference: bool) -> Reason:
        """The common case of ``_explain`` from sorted node summaries instead of a scan.

        Same answers as the scan (a test compares them): the open nodes' best cards are kept in
        sorted lists, updated with every placement and release, so explaining a miss on a
        thousand-node cluster costs a lookup rather than a pass over every card.
        """
        if self._explain_lists is None:
            self._explain_lists = {False: (SortedList(), SortedList(), {}), True: (SortedList(), SortedList(), {})}
            self._explain_open = {False: 0, True: 0}
            self._explain_entries: dict[int, dict[bool, tuple]] = {}
            for node in self.nodes:
                self._explain_refresh(node)
        by_core, by_mib, _ = self._explain_lists[inference]
        if not self._explain_open[inference]:
            return _node_cap_reason([n for n in self.nodes if n.available], inference, 1)
        if not by_core:
            return _card_cap_reason([n for n in self.nodes if n.available and n.has_room(inference)], inference)
        most_core, order, position = by_core[0]
        most_core = -most_core
        if most_core < core:
            node = self.nodes[order]
            card_index = node.cards[position].index
            return Reason.of("card.core", need_percent=core, best_free_percent=most_core, node=node.name, card=card_index)
        most_mib, order, position = by_mib[0]
        most_mib = -most_mib
        if most_mib < memory:
            node = self.nodes[order]
            card_index = node.cards[position].index
            return Reason.of("card.memory", need_mib=memory, best_free_mib=most_mib, node=node.name, card=card_index)
        return Reason.of("capacity.no_single_card", core_percent=core, memory_mib=memory)

    def _explain_refresh(self, node: _Node) -> None:
        # Summaries are worked out only once some request has missed: a cluster that never
        # runs full pays nothing for explanations.
        if self._explain_lists is None:
            return
        if node.summary is None:
            node.summarise()
        old = self._explain_entries.get(node.order, {})
        new = {}
        for inference in (False, True):
            by_core, by_mib, _ = self._explain_lists[inference]
            is_open = node.available and node.has_room(inference)
            core_card, mib_card = node.summary[_INF_CARD_CAP if inference else _DEV_CARD_CAP]
            core_key = mib_key = None
            if is_open and core_card is not None:
                core_key = (core_card.core_used - CORE_PERCENT_MAX, node.order, node.cards.index(core_card))
                mib_key = (mib_card.memory_used - mib_card.memory_mib, node.order, node.cards.index(mib_card))
            previous = old.get(inference, (None, None, False))
            if previous[0] != core_key:
                if previous[0] is not None:
                    by_core.remove(previous[0])
                if core_key is not None:
                    by_core.add(core_key)
            if previous[1] != mib_key:
                if previous[1] is not None:
                    by_mib.remove(previous[1])
                if mib_key is not None:
                    by_mib.add(mib_key)
            self._explain_open[inference] += int(is_open) - int(previous[2])
            new[inference] = (core_key, mib_key, is_open)
        self._explain_entries[node.order] = new


def _node_cap_reason(nodes: list[_Node], inference: bool, cards: int) -> Reason:
    """Why none of ``nodes`` takes ``cards`` more instances, quoting the cap that binds on them.

    A node's cap is 64 once an inference instance is on it or joins it, 128 otherwise.
    """
    names = _names(nodes)
    if cards > 1 and any(n.count < n.cap(inference) for n in nodes):
        return Reason.of("node.instances_room", cards=cards, nodes=names)
    caps = {n.cap(inference) for n in nodes}
    if len(caps) == 1:
        return Reason.of("node.instances_cap", cap=caps.pop(), nodes=names)
    return Reason.of("node.instances_caps", inference_cap=_INF_NODE_CAP, development_cap=_DEV_NODE_CAP, nodes=names)


def _card_cap_reason(nodes: list[_Node], inference: bool, die_id: str = "") -> Reason:
    """Why no healthy card of ``nodes`` (the pinned one with ``die_id``) takes one more instance.

    Each such card holds its maximum: 8 once an inference instance is on it or joins it, 16
    otherwise; the reason quotes the one that binds, or both when the cards differ.
    """
    caps = {
        _INF_CARD_CAP if inference or card.inference else _DEV_CARD_CAP
        for node in nodes
        for card in node.cards
        if card.healthy and (not die_id or card.die_id == die_id)
    }
    if len(caps) <= 1:
        return Reason.of("card.instances_cap", cap=caps.pop() if caps else _INF_CARD_CAP if inference else _DEV_CARD_CAP)
    return Reason.of("card.instances_caps", inference_cap=_INF_CARD_CAP, development_cap=_DEV_CARD_CAP)


def _host_reason(nodes: list[_Node], cpu: int, memory: int) -> Reason:
    """Why none of ``nodes`` has the host CPU or memory left: memory first, with the node that has the most free."""
    limited = [n for n in nodes if n.host_mib_total is not None]
    if limited and not any(n.host_mib_used + memory <= n.host_mib_total for n in limited):
        node = max(limited, key=lambda n: (n.host_mib_total - n.host_mib_used, -n.order))
        free = node.host_mib_total - node.host_mib_used
        return Reason.of("node.host_memory", need_mib=memory, best_free_mib=free, node=node.name)
    limited = [n for n in nodes if n.cpu_total is not None]
    node = max(limited, key=lambda n: (n.cpu_total - n.cpu_used, -n.order))
    return Reason.of("node.host_cpu", need_millicores=cpu, best_free_millicores=node.cpu_total - node.cpu_used, node=node.name)


def _names(nodes: list[_Node]) -> str:
    names = [n.name for n in nodes[:5]]
    return ", ".join(names) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
