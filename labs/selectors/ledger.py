"""What the ledger holds on each card, for the pages and metrics that show cards one by one."""

from __future__ import annotations

from django.db.models import Count, Q, Sum

from labs.domain.units import CORE_PERCENT_MAX, Scenario
from labs.models import Allocation


def held_by_card(*, node_id: int | None = None) -> dict[int, tuple[int, int, int, int]]:
    """Per card id: (instances, inference instances, core percent, memory MiB) of live allocations
    (on the cards of ``node_id`` only, when given).

    A whole-card allocation counts on each of its cards as one instance holding 100 % and that
    card's whole memory (its row carries the total). One query, two when whole cards are held.
    """
    live = Allocation.objects.filter(released_at__isnull=True)
    links = Allocation.more_cards.through.objects.filter(allocation__released_at__isnull=True)
    if node_id is not None:
        live = live.filter(card__node_id=node_id)
        links = links.filter(card__node_id=node_id)
    held: dict[int, tuple[int, int, int, int]] = {}
    whole = False
    rows = (
        live.values("card_id", "cards")
        .annotate(
            n=Count("id"),
            inference=Count("id", filter=Q(scenario=Scenario.INFERENCE)),
            core=Sum("core_percent"),
            memory=Sum("memory_mib"),
        )
        .values_list("card_id", "cards", "n", "inference", "core", "memory")
        .order_by()
    )
    for card_id, cards, n, inference, core, memory in rows:
        if cards > 1:
            whole = True  # counted per card below, from each card's own memory
            continue
        held[card_id] = (n, inference, core, memory)
    if not whole:
        return held
    first = live.filter(cards__gt=1).values_list("card_id", "card__memory_mib", "scenario")
    more = links.values_list("card_id", "card__memory_mib", "allocation__scenario")
    for card_id, memory_mib, scenario in first.union(more, all=True):
        n, inference, core, memory = held.get(card_id, (0, 0, 0, 0))
        held[card_id] = (n + 1, inference + (scenario == Scenario.INFERENCE), core + CORE_PERCENT_MAX, memory + memory_mib)
    return held
