"""What the cluster has to give, as the placement engine reads it: every node and card with the
instances the ledger holds on them, and the engine's configuration (``settings.LAB_PLACEMENT``).

Read by the allocation pass, the reservations' checks, the catalogue's "how many fit" and the
operator's cluster page alike.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import CharField, F, FloatField, Func
from django.db.models.functions import Cast

from labs.domain.placement import CardCapacity, Instance, NodeCapacity, PlacementConfig, Policy, ScoreWeights
from labs.domain.quota import CourseQuota as QuotaRule
from labs.domain.quota import Resources
from labs.domain.units import CORE_PERCENT_MAX, MEMORY_GRANULE_MIB, Scenario
from labs.models import Allocation, Card, CourseQuota, Node
from labs.models.cluster import node_allocatable


def placement_config() -> PlacementConfig:
    """``settings.LAB_PLACEMENT`` as the engine's configuration (validated at start-up)."""
    return _placement_config_from(settings.LAB_PLACEMENT)


def _placement_config_from(options: dict) -> PlacementConfig:
    known = {"node_policy", "card_policy", "weights", "min_runtime_seconds"}
    unknown = set(options) - known
    if unknown:
        raise ImproperlyConfigured(f"LAB_PLACEMENT has unknown keys {sorted(unknown)}; known: {sorted(known)}")
    try:
        weights = options.get("weights", {})
        return PlacementConfig(
            node_policy=Policy(options.get("node_policy", "binpack")),
            card_policy=Policy(options.get("card_policy", "binpack")),
            weights=ScoreWeights(**weights),
            min_runtime_seconds=float(options.get("min_runtime_seconds", 600)),
        )
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"LAB_PLACEMENT is invalid: {exc} (policies are binpack or spread)") from exc


def _limit(*values: int | None) -> Resources | None:
    return None if any(v is None for v in values) else Resources(*values)  # type: ignore[arg-type]


def quota_rule(quota: CourseQuota, allowed_templates: frozenset[int] | None) -> QuotaRule:
    """A course's quota (the model) as the engine's rule; ``allowed_templates`` ``None``: any."""
    return QuotaRule(
        guarantee=Resources(quota.core_percent, quota.memory_mib, quota.instance_count),
        cohort=quota.cohort or None,
        borrowing_limit=_limit(quota.borrow_core_percent, quota.borrow_memory_mib, quota.borrow_instances),
        lending_limit=_limit(quota.lend_core_percent, quota.lend_memory_mib, quota.lend_instances),
        sessions_per_student=quota.sessions_per_student,
        allowed_templates=allowed_templates,
        host_cpu_cap_millicores=quota.host_cpu_cap_millicores,
        host_memory_cap_mib=quota.host_memory_cap_mib,
    )


def capacity_snapshot() -> list[NodeCapacity]:
    """Every node and card with the instances the ledger has on it (unreleased allocations).

    Read as plain rows, not model instances: with tens of thousands of live allocations this is
    most of an allocation pass (bench.pass_scale), so PostgreSQL also hands over the session id
    as text and the start time as epoch seconds rather than values Python must parse.
    """
    instances: dict[int, list[Instance]] = defaultdict(list)
    live = Allocation.objects.filter(released_at__isnull=True, cards=1)
    if connection.vendor == "postgresql":
        live = live.annotate(
            key=Cast("session_id", CharField()),
            since=Func(
                F("created_at"), template="EXTRACT(EPOCH FROM %(expressions)s)::double precision", output_field=FloatField()
            ),
        ).values_list(
            "card_id", "core_percent", "memory_mib", "scenario", "key", "course_id", "since", "cpu_millicores", "host_memory_mib"
        )
        for card_id, core, memory, scenario, key, course_id, since, cpu, host_mib in live:
            instances[card_id].append(
                Instance(core, memory, Scenario(scenario), key, course_id, since, cpu_millicores=cpu, host_memory_mib=host_mib)
            )
    else:
        rows = live.values_list(
            "card_id",
            "core_percent",
            "memory_mib",
            "scenario",
            "session_id",
            "course_id",
            "created_at",
            "cpu_millicores",
            "host_memory_mib",
        )
        for card_id, core, memory, scenario, session_id, course_id, created_at, cpu, host_mib in rows:
            instances[card_id].append(
                Instance(
                    core,
                    memory,
                    Scenario(scenario),
                    str(session_id),
                    course_id,
                    created_at.timestamp(),
                    cpu_millicores=cpu,
                    host_memory_mib=host_mib,
                )
            )
    whole = _whole_card_holds()
    cards_by_node: dict[int, list[CardCapacity]] = defaultdict(list)
    unseen = set(Node.objects.filter(card_truth=Node.CardTruth.NONE).values_list("pk", flat=True))
    cards = Card.objects.order_by("node_id", "index").values_list(
        "pk", "node_id", "index", "memory_mib", "healthy", "disabled", "die_id", "chip_type", "memory_used_mib"
    )
    for pk, node_id, index, memory_mib, healthy, disabled, die_id, chip_type, measured in cards:
        # A whole-card instance holds all of each of its cards: 100 % and the card's memory.
        on_card = (*instances.get(pk, ()), *(replace(held, memory_mib=memory_mib) for held in whole.get(pk, ())))
        unlisted = unlisted_memory(memory_mib, on_card, measured) if node_id in unseen else 0
        # A card an operator marked unhealthy takes nothing new, whatever its agent says.
        usable = healthy and not disabled
        cards_by_node[node_id].append(CardCapacity(pk, index, memory_mib, usable, on_card, die_id, chip_type, unlisted))
    nodes = Node.objects.order_by("name").values_list(
        "pk",
        "name",
        "available",
        "drained",
        "readiness_code",
        "labels",
        "memory_granule_mib",
        "host_cpu_millicores",
        "host_memory_mib",
    )
    return [
        NodeCapacity(
            name,
            tuple(cards_by_node.get(pk, ())),
            # A drained node takes no new placement, nor one whose device profile's preconditions
            # do not hold (labs.domain.readiness): its device plugin could not serve the share. Their
            # sessions go on.
            available and not drained and not unready,
            # Labels are JSON in the database; the engine compares strings.
            {str(key): str(value) for key, value in (labels or {}).items()},
            granule,
            *node_allocatable(cpu, host_mib),
            drained,
        )
        for pk, name, available, drained, unready, labels, granule, cpu, host_mib in nodes
    ]


def _whole_card_holds() -> dict[int, list[Instance]]:
    """The live whole-card allocations as the instance each of their cards holds, by card id (the
    memory is the card's own: the caller sets it)."""
    live = Allocation.objects.filter(released_at__isnull=True, cards__gt=1)
    rows = list(
        live.values_list(
            "pk", "card_id", "scenario", "session_id", "course_id", "created_at", "cpu_millicores", "host_memory_mib", "cards"
        )
    )
    if not rows:
        return {}
    more: dict[int, list[int]] = defaultdict(list)
    links = Allocation.more_cards.through.objects.filter(allocation_id__in=[r[0] for r in rows])
    for allocation_id, card_id in links.values_list("allocation_id", "card_id"):
        more[allocation_id].append(card_id)
    holds: dict[int, list[Instance]] = defaultdict(list)
    for pk, card_id, scenario, session_id, course_id, created_at, cpu, host_mib, cards in rows:
        held = Instance(
            CORE_PERCENT_MAX,
            0,
            Scenario(scenario),
            str(session_id),
            course_id,
            created_at.timestamp(),
            cards=cards,
            cpu_millicores=cpu,
            host_memory_mib=host_mib,
        )
        for on in (card_id, *more[pk]):
            holds[on].append(held)
    return holds


def memory_beyond_ledger(measured_mib: int | None, held_mib: int) -> int:
    """Memory measured in use on a card beyond the ``held_mib`` the ledger lists there, rounded up
    to the 128 MiB grid; 0 when unmeasured. What placement charges (:func:`unlisted_memory`) and
    what the reconciler reports (``card_totals``) on nodes whose cards are not reported."""
    if not measured_mib:
        return 0
    return -(-max(0, measured_mib - held_mib) // MEMORY_GRANULE_MIB) * MEMORY_GRANULE_MIB


def unlisted_memory(memory_mib: int, listed: tuple[Instance, ...], measured_mib: int | None) -> int:
    """Memory the agent measured in use on a card beyond what the ledger lists there, on the 128 MiB grid.

    For a node whose device plugin picks the card without telling (``Node.card_truth`` "none"):
    the ledger's card is only a packing, so a card that holds more than the packing says (an
    instance the plugin put there instead, or a workload outside the portal) is charged the
    difference. Never more than the card has left, never negative; nothing when unmeasured.
    """
    held = sum(i.memory_mib for i in listed)
    return min(memory_beyond_ledger(measured_mib, held), max(0, memory_mib - held))
