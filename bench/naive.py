"""The naive reference: what a straightforward placer does — recompute every card's usage from
its instance list and scan every card of every node for each request.

Same policies and tie-breaks as ``labs.domain.placement.Cluster`` (the tests check that both
choose the same cards), none of its bookkeeping: no running totals, no per-shape index.
"""

from __future__ import annotations

from labs.domain.placement import DEFAULT_CONFIG, CardCapacity, Instance, LaunchRequest, NodeCapacity, PlacementConfig, Policy
from labs.domain.units import Scenario


class NaiveCluster:
    def __init__(self, nodes: list[NodeCapacity], config: PlacementConfig = DEFAULT_CONFIG) -> None:
        self.config = config
        self.nodes = [(n, [list(c.instances) for c in sorted(n.cards, key=lambda c: c.index)]) for n in nodes]
        self.where: dict[str, list[Instance]] = {}
        for _, cards in self.nodes:
            for instances in cards:
                for instance in instances:
                    self.where[instance.key] = instances

    def place(self, request: LaunchRequest) -> tuple[str, int] | None:
        w = self.config.weights
        inference = request.scenario == Scenario.INFERENCE
        best = None
        best_key = None
        for order, (node, cards) in enumerate(self.nodes):
            if not node.available or request.memory_mib % node.memory_granule_mib:
                continue
            everything = [i for instances in cards for i in instances]
            node_inference = any(i.scenario == Scenario.INFERENCE for i in everything)
            if len(everything) >= (64 if inference or node_inference else 128):
                continue
            card_total = len(cards)
            node_cap = (8 if node_inference else 16) * card_total
            node_score = (
                w.instances * len(everything) * 10_000 // node_cap
                + w.core * sum(i.core_percent for i in everything) * 100 // card_total
                + w.memory * sum(i.memory_mib for i in everything) * 10_000 // (sum(c.memory_mib for c in node.cards) or 1)
            )
            for source, instances in zip(sorted(node.cards, key=lambda c: c.index), cards, strict=True):
                fits, score = self._fit(source, instances, request, inference)
                if not fits:
                    continue
                if self.config.node_policy == Policy.BINPACK:
                    tier = 0 if instances or self.config.card_policy != Policy.BINPACK else 1
                    node_key = (tier, -node_score, order)
                else:
                    node_key = (node_score, order)
                # Binpack: a partly used card before any empty one, whatever the weights.
                binpack_key = -score if instances else 1
                card_key = (binpack_key if self.config.card_policy == Policy.BINPACK else score, source.index)
                key = (node_key, card_key)
                if best_key is None or key < best_key:
                    best_key, best = key, (order, source.index)
        if best is None:
            return None
        node, cards = self.nodes[best[0]]
        instances = cards[best[1]]
        instances.append(Instance(request.core_percent, request.memory_mib, request.scenario, request.key, request.course_id))
        self.where[request.key] = instances
        return node.name, best[1]

    def _fit(self, card: CardCapacity, instances: list[Instance], request: LaunchRequest, inference: bool) -> tuple[bool, int]:
        if not card.healthy:
            return False, 0
        core = sum(i.core_percent for i in instances)
        memory = sum(i.memory_mib for i in instances)
        card_inference = any(i.scenario == Scenario.INFERENCE for i in instances)
        cap = 8 if inference or card_inference else 16
        if core + request.core_percent > 100 or memory + request.memory_mib > card.memory_mib or len(instances) >= cap:
            return False, 0
        w = self.config.weights
        current_cap = 8 if card_inference else 16
        score = (
            w.instances * len(instances) * 10_000 // current_cap
            + w.core * core * 100
            + w.memory * memory * 10_000 // card.memory_mib
        )
        return True, score

    def release(self, key: str) -> bool:
        instances = self.where.pop(key, None)
        if instances is None:
            return False
        instances[:] = [i for i in instances if i.key != key]
        return True
