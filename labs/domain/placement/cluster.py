"""``Cluster``: the capacity state of one pass, choosing a card for a request and recording
placements and releases; with the per-shape index of the nodes a request fits on.

Its explanations (``explain``), reclaim plans (``reclaim``) and snapshot in and out (``snapshot``)
are written in their own modules and mixed in; the package docstring says what it guarantees.
"""

from __future__ import annotations

from collections.abc import Iterable

from sortedcontainers import SortedList

from labs.domain.placement.explain import ExplainMixin
from labs.domain.placement.model import (
    DEFAULT_CONFIG,
    Holding,
    Instance,
    LaunchRequest,
    NodeCapacity,
    PlacementConfig,
    Policy,
    largest_limit,
)
from labs.domain.placement.reclaim import ReclaimMixin
from labs.domain.placement.snapshot import SnapshotMixin
from labs.domain.placement.state import (
    _DEV_CARD_CAP,
    _DEV_NODE_CAP,
    _INF_CARD_CAP,
    _INF_NODE_CAP,
    Choice,
    Shape,
    _Card,
    _matches,
    _Node,
    _Placement,
    _shape,
)
from labs.domain.reasons import Reason
from labs.domain.units import CORE_PERCENT_MAX, Scenario


class Cluster(SnapshotMixin, ExplainMixin, ReclaimMixin):
    """The mutable capacity state of one pass. See the package docstring (``labs.domain.placement``)."""

    def __init__(self, nodes: Iterable[NodeCapacity], config: PlacementConfig = DEFAULT_CONFIG) -> None:
        sources = list(nodes)
        self.config = config
        self.nodes = [_Node(n, order) for order, n in enumerate(sources)]
        self._placements: dict[str, _Placement] = {}
        self._indexes: dict[tuple[Shape, Policy, Policy], _ShapeIndex] = {}
        self._use_index = len(self.nodes) > config.index_min_nodes
        self._single = self.nodes[0] if len(self.nodes) == 1 else None
        # Changes with every placement and release; keys the explanation cache.
        self._version = 0
        self._explained: dict[tuple, tuple[int, Reason]] = {}
        self._by_course: dict[int, set[str]] = {}
        self._single_granule = len({n.granule for n in self.nodes}) <= 1
        # Availability and health are fixed for the life of a Cluster (one pass).
        self._healthy_available = any(n.available and n.healthy_cards for n in self.nodes)
        self._explain_lists: dict[bool, tuple] | None = None  # built on the first miss
        self.largest_card_mib = max((c.memory_mib for n in self.nodes for c in n.cards), default=0)
        self.most_cards_per_node = max((len(n.cards) for n in self.nodes), default=0)
        self.granules = frozenset(n.granule for n in self.nodes)
        self._whole_card_mib: dict[int, int] = {}
        # The most host CPU / memory any node offers lab sessions; ``None`` when some node is unlimited.
        self.largest_cpu_millicores = largest_limit(n.cpu_total for n in self.nodes)
        self.largest_host_mib = largest_limit(n.host_mib_total for n in self.nodes)
        # Nodes that limit host CPU or memory: explanations then take the scan, which counts them.
        self._host_limited = any(n.cpu_total is not None or n.host_mib_total is not None for n in self.nodes)
        for source, node in zip(sources, self.nodes, strict=True):
            self._load(node, source)

    def _add(self, placement: _Placement, where: str) -> None:
        if placement.key in self._placements:
            raise ValueError(f"snapshot: instance key {placement.key!r} appears twice (again on {where})")
        self._apply(placement, +1)
        self._placements[placement.key] = placement
        if placement.course_id is not None:
            self._by_course.setdefault(placement.course_id, set()).add(placement.key)

    # --- scores -------------------------------------------------------------------------------

    def card_score(self, card: _Card) -> int:
        w = self.config.weights
        cap = _INF_CARD_CAP if card.inference else _DEV_CARD_CAP
        return (
            w.instances * card.count * 10_000 // cap
            + w.core * card.core_used * 100
            + w.memory * card.memory_used * 10_000 // (card.memory_mib or 1)
        )

    def node_score(self, node: _Node) -> int:
        w = self.config.weights
        cards = len(node.cards) or 1
        cap = (_INF_CARD_CAP if node.inference else _DEV_CARD_CAP) * cards
        return (
            w.instances * node.count * 10_000 // cap
            + w.core * node.core_used * 100 // cards
            + w.memory * node.memory_used * 10_000 // node.memory_total
        )

    # --- choosing -----------------------------------------------------------------------------

    def choose(self, request: LaunchRequest) -> Choice | None:
        """The node and card(s) the policies pick for ``request``, or ``None``; changes nothing."""
        node_policy = request.node_policy or self.config.node_policy
        card_policy = request.card_policy or self.config.card_policy
        shape = _shape(request)
        if self._single is not None and not request.node_selector:
            # One server (the embedded default): no node to compare, so no node score to compute.
            only = self._single
            if (
                not only.available
                or shape[1] % only.granule
                or not only.has_room(shape[2], shape[3])
                or not only.host_fits(shape[4], shape[5])
            ):
                return None
            return self._choose_cards(only, request, card_policy, shape)
        if self._use_index and not request.node_selector and not request.die_id:
            index = self._index_for(shape, node_policy, card_policy)
            node = index.best()
            return None if node is None else self._choose_cards(node, request, card_policy, shape)
        return self.choose_by_scan(request, node_policy, card_policy, shape)

    def choose_by_scan(
        self,
        request: LaunchRequest,
        node_policy: Policy | None = None,
        card_policy: Policy | None = None,
        shape: Shape | None = None,
    ) -> Choice | None:
        """The reference: look at every node. Same answer as the index, slower."""
        node_policy = node_policy or request.node_policy or self.config.node_policy
        card_policy = card_policy or request.card_policy or self.config.card_policy
        shape = shape or _shape(request)
        best_key = None
        best_node = None
        for node in self.nodes:
            if request.node_selector and not _matches(node, request.node_selector):
                continue
            key = self._node_key(node, shape, node_policy, card_policy, request.die_id)
            if key is not None and (best_key is None or key < best_key):
                best_key, best_node = key, node
        return None if best_node is None else self._choose_cards(best_node, request, card_policy, shape)

    def _node_key(
        self, node: _Node, shape: Shape, node_policy: Policy, card_policy: Policy, die_id: str = "", score: int | None = None
    ) -> tuple | None:
        """Sort key of ``node`` for ``shape`` (smaller is better), or ``None`` when it does not fit.

        Runs once per index for every node a placement or release changes: ``_Card.fits`` is
        written out inline, and ``score`` may be passed in when the caller already has it.
        """
        core, memory, inference, cards, cpu, host_mib = shape
        if not node.available or memory % node.granule or not node.has_room(inference, cards):
            return None
        if not node.host_fits(cpu, host_mib):
            return None
        partly_used = False
        if cards > 1:
            if sum(1 for c in node.cards if c.takes_whole(memory)) < cards:
                return None
        else:
            fits = False
            core_limit = CORE_PERCENT_MAX - core
            for card in node.cards:
                if (
                    card.healthy
                    and card.core_used <= core_limit
                    and card.memory_used + memory <= card.memory_mib
                    and card.count < (_INF_CARD_CAP if inference or card.inference else _DEV_CARD_CAP)
                    and (not die_id or card.die_id == die_id)
                ):
                    fits = True
                    if card.count:
                        partly_used = True
                        break
            if not fits:
                return None
        if score is None:
            score = self.node_score(node)
        if node_policy == Policy.BINPACK:
            tier = 0 if partly_used or card_policy != Policy.BINPACK else 1
            return (tier, -score, node.order)
        return (score, node.order)

    def _choose_cards(self, node: _Node, request: LaunchRequest, card_policy: Policy, shape: Shape) -> Choice | None:
        core, memory, inference, cards = shape[:4]
        if cards > 1:
            free = [c for c in node.cards if c.takes_whole(memory)]
            return Choice(node, tuple(free[:cards]), shape) if len(free) >= cards else None
        # The hot loop of every placement: ``_Card.fits`` written out inline.
        die_id = request.die_id
        sign = -1 if card_policy == Policy.BINPACK else 1
        best = None
        best_key = 0
        for card in node.cards:  # in index order, so the first of equal keys has the lower index
            if not card.healthy or (die_id and card.die_id != die_id):
                continue
            if card.core_used + core > CORE_PERCENT_MAX or card.memory_used + memory > card.memory_mib:
                continue
            card_inference = card.inference
            if card.count >= (_INF_CARD_CAP if inference or card_inference else _DEV_CARD_CAP):
                continue
            # Binpack ranks an empty card (score 0 whatever the weights) after every partly used
            # one, even one whose score is 0 with zero weights or only best-effort instances.
            key = sign * card.score if card.count or sign > 0 else 1
            if best is None or key < best_key:
                best, best_key = card, key
        return None if best is None else Choice(node, (best,), shape)

    def _index_for(self, shape: Shape, node_policy: Policy, card_policy: Policy) -> _ShapeIndex:
        key = (shape, node_policy, card_policy)
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = _ShapeIndex(self, shape, node_policy, card_policy)
        return index

    # --- changing -----------------------------------------------------------------------------

    def commit(self, request: LaunchRequest, choice: Choice, *, started_at: float = 0.0) -> None:
        """Record ``request`` on the chosen card(s); ``started_at`` is in seconds.

        ``choice`` must come from ``choose`` for this request with nothing committed in between.
        ``ValueError`` if an instance is already placed under ``request.key``: one key, one instance.
        """
        key = request.key
        if key in self._placements:
            raise ValueError(f"request key {key!r} is already placed; a key names one instance")
        core, memory, inference, cards, cpu, host_mib = choice.shape
        if cards == 1:  # the common case, spelled out: this runs for every placement
            card = choice.cards[0]
            node = choice.node
            placement = _Placement(
                key,
                core,
                memory,
                request.scenario,
                request.course_id,
                request.student_id,
                started_at,
                choice.cards,
                False,
                cpu,
                host_mib,
            )
            node.cpu_used += cpu
            node.host_mib_used += host_mib
            card.core_used += core
            card.memory_used += memory
            card.count += 1
            node.core_used += core
            node.memory_used += memory
            node.count += 1
            if inference:
                card.inference += 1
                node.inference += 1
            card.score = self.card_score(card)
        else:
            placement = _Placement(
                key,
                CORE_PERCENT_MAX,
                choice.cards[0].memory_mib,
                request.scenario,
                request.course_id,
                request.student_id,
                started_at,
                choice.cards,
                True,
                cpu,
                host_mib,
            )
            self._apply(placement, +1)
        self._placements[key] = placement
        self._version += 1
        if request.course_id is not None:
            self._by_course.setdefault(request.course_id, set()).add(key)
        choice.node.summary = None
        self._explain_refresh(choice.node)
        if self._indexes:
            self._refresh(choice.node)

    def release(self, key: str) -> Holding | None:
        """Remove the instance placed under ``key`` from every card it holds.

        Returns what it held (course, student, charge by ``instance_charge``), or ``None`` if
        there is no instance by that key.
        """
        placement = self.set_aside(key)
        if placement is None:
            return None
        return Holding(placement.course_id, placement.student_id, placement.started_at, placement.charge())

    def set_aside(self, key: str) -> _Placement | None:
        """Remove the instance placed under ``key`` and return it as it was, for ``put_back``
        (planning what the cluster will be once it has gone); ``None`` if there is none."""
        placement = self._placements.pop(key, None)
        if placement is None:
            return None
        if placement.course_id is not None:
            self._by_course.get(placement.course_id, set()).discard(key)
        self._apply(placement, -1)
        self._changed(placement.cards[0].node)
        return placement

    def put_back(self, placement: _Placement) -> None:
        """Place again an instance ``set_aside`` removed, where it was."""
        self._add(placement, "put back")
        self._changed(placement.cards[0].node)

    def _changed(self, node: _Node) -> None:
        self._version += 1
        node.summary = None
        self._explain_refresh(node)
        self._refresh(node)

    def _apply(self, placement: _Placement, sign: int) -> None:
        inference = placement.scenario == Scenario.INFERENCE
        host_node = placement.cards[0].node
        host_node.cpu_used += sign * placement.cpu_millicores
        host_node.host_mib_used += sign * placement.host_memory_mib
        for card in placement.cards:
            core = CORE_PERCENT_MAX if placement.whole else placement.core_percent
            memory = card.memory_mib if placement.whole else placement.memory_mib
            card.core_used += sign * core
            card.memory_used += sign * memory
            card.count += sign
            if inference:
                card.inference += sign
            card.score = self.card_score(card)
            node = card.node
            node.core_used += sign * core
            node.memory_used += sign * memory
            node.count += sign
            if inference:
                node.inference += sign

    def _refresh(self, node: _Node) -> None:
        # Indexes re-sort a changed node only when next asked: binpack changes one node many
        # times in a row, and a rarely launched shape should not pay for every placement.
        for index in self._indexes.values():
            index.dirty.add(node.order)

    # --- reading ------------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        """Whether an instance is placed under ``key``."""
        return key in self._placements

    def instance_of(self, key: str) -> tuple[Instance, int] | None:
        """The instance placed under ``key`` (as on its first card) and how many cards it holds."""
        placement = self._placements.get(key)
        return None if placement is None else (placement.instance_on(placement.cards[0]), len(placement.cards))

    def placement_of(self, key: str) -> tuple[Instance, tuple[tuple[str, int], ...]] | None:
        """The instance placed under ``key`` and its (node name, card index) pairs."""
        placement = self._placements.get(key)
        if placement is None:
            return None
        return placement.instance_on(placement.cards[0]), tuple((c.node.name, c.index) for c in placement.cards)

    def course_holdings(self, course_id: int) -> Iterable[tuple[str, Holding]]:
        """The key and holding of every instance of ``course_id``, in no particular order."""
        for key in self._by_course.get(course_id, ()):
            placement = self._placements[key]
            yield key, Holding(placement.course_id, placement.student_id, placement.started_at, placement.charge())

    def instances(self) -> Iterable[tuple[str, Instance, _Card]]:
        """Every placed instance with its (first) card."""
        for key, placement in self._placements.items():
            yield key, placement.instance_on(placement.cards[0]), placement.cards[0]

    def host_usage_by_course(self) -> dict[int, tuple[int, int]]:
        """Host CPU (millicores) and memory (MiB) each course's placed instances request."""
        usage: dict[int, tuple[int, int]] = {}
        for placement in self._placements.values():
            if placement.course_id is not None:
                cpu, mib = usage.get(placement.course_id, (0, 0))
                usage[placement.course_id] = (cpu + placement.cpu_millicores, mib + placement.host_memory_mib)
        return usage

    def usage_by_course(self) -> dict[int, tuple[int, int, int]]:
        """(core percent, memory MiB, instances) per course, each instance charged by ``instance_charge``."""
        usage: dict[int, tuple[int, int, int]] = {}
        for placement in self._placements.values():
            if placement.course_id is None:
                continue
            core, memory, count = usage.get(placement.course_id, (0, 0, 0))
            charge = placement.charge()
            usage[placement.course_id] = (core + charge.core_percent, memory + charge.memory_mib, count + charge.instances)
        return usage

    def whole_card_memory(self, memory_mib: int) -> int:
        """The memory (MiB) of the smallest healthy card of at least ``memory_mib``, or 0 if none.

        What each card of a whole-card request for ``memory_mib`` per card would be charged,
        known before the cards are chosen (exact when a cluster's cards are all alike).
        """
        known = self._whole_card_mib.get(memory_mib)
        if known is None:
            sizes = [c.memory_mib for n in self.nodes for c in n.cards if c.healthy and c.memory_mib >= memory_mib]
            known = self._whole_card_mib[memory_mib] = min(sizes, default=0)
        return known

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if any card or node is over a limit (used by tests and benches)."""
        for node in self.nodes:
            assert node.count <= (_INF_NODE_CAP if node.inference else _DEV_NODE_CAP), node.name
            assert node.host_fits(0, 0), (node.name, "host")
            for card in node.cards:
                assert card.core_used <= CORE_PERCENT_MAX, (node.name, card.index)
                assert card.memory_used <= card.memory_mib, (node.name, card.index)
                assert card.count <= (_INF_CARD_CAP if card.inference else _DEV_CARD_CAP), (node.name, card.index)


class _ShapeIndex:
    """The nodes one request shape fits on, sorted best first for one pair of policies."""

    __slots__ = ("cluster", "shape", "node_policy", "card_policy", "sorted", "keys", "dirty")

    def __init__(self, cluster: Cluster, shape: Shape, node_policy: Policy, card_policy: Policy) -> None:
        self.cluster = cluster
        self.shape = shape
        self.node_policy = node_policy
        self.card_policy = card_policy
        self.keys: dict[int, tuple] = {}
        self.dirty: set[int] = set()
        entries = []
        for node in cluster.nodes:
            key = cluster._node_key(node, shape, node_policy, card_policy)
            if key is not None:
                self.keys[node.order] = key
                entries.append(key)
        self.sorted = SortedList(entries)

    def best(self) -> _Node | None:
        if self.dirty:
            nodes = self.cluster.nodes
            for order in self.dirty:
                self.refresh(nodes[order], self.cluster.node_score(nodes[order]))
            self.dirty.clear()
        if not self.sorted:
            return None
        return self.cluster.nodes[self.sorted[0][-1]]

    def refresh(self, node: _Node, score: int) -> None:
        key = self.cluster._node_key(node, self.shape, self.node_policy, self.card_policy, score=score)
        old = self.keys.get(node.order)
        if key == old:
            return
        if old is not None:
            self.sorted.remove(old)
            del self.keys[node.order]
        if key is not None:
            self.keys[node.order] = key
            self.sorted.add(key)
