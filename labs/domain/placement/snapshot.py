"""A ``Cluster`` loaded from a capacity snapshot and written back as one (a round trip is exact)."""

from __future__ import annotations

from labs.domain.placement.model import CardCapacity, Instance, NodeCapacity
from labs.domain.placement.state import _Card, _Node, _Placement
from labs.domain.units import CORE_PERCENT_MAX


class SnapshotMixin:
    """``Cluster``'s snapshot in and out; mixed into ``Cluster``, whose state it reads and writes."""

    def _load(self, node: _Node, source: NodeCapacity) -> None:
        """Record the instances a snapshot has on ``node``; ``ValueError`` if one cannot be placed back.

        A whole-card instance is listed on each of its cards with the same key: those entries
        become one placement again, so a snapshot round trip is exact and a release frees every
        card. A key may name one instance only, in the whole snapshot.
        """
        whole: dict[str, list[tuple[_Card, Instance]]] = {}
        for card_source, card in zip(sorted(source.cards, key=lambda c: c.index), node.cards, strict=True):
            for instance in card_source.instances:
                if instance.cards > 1:
                    whole.setdefault(instance.key, []).append((card, instance))
                    continue
                key = instance.key
                if not key:  # a residual the snapshot cannot name still takes its capacity
                    key = f"~{len(self._placements)}"
                    while key in self._placements:
                        key += "~"
                self._add(
                    _Placement(
                        key,
                        instance.core_percent,
                        instance.memory_mib,
                        instance.scenario,
                        instance.course_id,
                        instance.student_id,
                        instance.started_at,
                        (card,),
                        False,
                        instance.cpu_millicores,
                        instance.host_memory_mib,
                    ),
                    f"node {node.name}, card {card.index}",
                )
        for key, entries in whole.items():
            first = entries[0][1]
            same = all(
                (i.scenario, i.course_id, i.student_id, i.started_at, i.cards)
                == (first.scenario, first.course_id, first.student_id, first.started_at, first.cards)
                for _, i in entries
            )
            if not same or len(entries) != first.cards or len({id(card) for card, _ in entries}) != first.cards:
                raise ValueError(
                    f"snapshot: whole-card instance {key!r} on node {node.name} must appear once on each of its "
                    f"{first.cards} cards with the same fields; found {len(entries)} entries"
                )
            cards = tuple(card for card, _ in entries)
            placement = _Placement(
                key,
                CORE_PERCENT_MAX,
                cards[0].memory_mib,
                first.scenario,
                first.course_id,
                first.student_id,
                first.started_at,
                cards,
                True,
                first.cpu_millicores,
                first.host_memory_mib,
            )
            self._add(placement, f"node {node.name}")

    def snapshot(self) -> list[NodeCapacity]:
        """The current state as a capacity snapshot; ``Cluster(snapshot())`` is this state again.

        A whole-card instance appears on each of its cards, with the same key and ``cards``.
        """
        on_card: dict[int, list[Instance]] = {}
        for placement in self._placements.values():
            for card in placement.cards:
                on_card.setdefault(id(card), []).append(placement.instance_on(card))
        return [
            NodeCapacity(
                n.name,
                tuple(
                    CardCapacity(
                        c.card_id,
                        c.index,
                        c.memory_mib,
                        c.healthy,
                        tuple(on_card.get(id(c), ())),
                        c.die_id,
                        c.chip_type,
                        c.unlisted,
                    )
                    for c in n.cards
                ),
                n.available,
                dict(n.labels),
                n.granule,
                n.cpu_total,
                n.host_mib_total,
                n.maintenance,
            )
            for n in self.nodes
        ]
