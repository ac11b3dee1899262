"""Placement of FlexNPU instances on cards: the capacity model, policies, scores, explanations.

``Cluster`` is the working state of one allocation pass (or of a benchmark stream): built from a
capacity snapshot, it chooses a card for a request, records placements and releases, explains
a miss (a ``Reason``), reports fragmentation and plans reclaims. Nothing here reads a clock or
any I/O; the caller passes times in.

Invariants ``commit`` never breaks (DESIGN §1, §3): per card Σ core floors ≤ 100, Σ memory ≤
usable memory, instances ≤ the tightest scenario cap present (16 development, 8 inference);
per node ≤ 128 instances, or 64 once an inference instance is there. Unhealthy cards and
unavailable nodes are never chosen. A request of ``cards`` > 1 takes that many whole, empty
cards on one node (core 100 each) and counts as one instance on each of them.

Host resources are counted per node like the cards' (issue 14): a node that reports its
allocatable CPU (``cpu_millicores``) and host memory (``host_memory_mib``, both after the
system's reserve) never holds instances whose requests add up to more; a node that reports
neither (``None``, an old agent) is not limited.

Policies, chosen separately for nodes and cards (as Volcano's ``flexnpuaffinity`` and HAMi's
node/device policies): ``binpack`` puts the instance where utilisation is highest, ``spread``
where it is lowest. Utilisation is HAMi's weighted sum of instance count, core and memory
ratios, in integers. Binpack always prefers a partly used card (one holding any instance, a
best-effort one included) over an empty card, whatever the weights; under binpack at both
levels a node where the request fits on a partly used card ranks above any node where it would
open an empty card. Ties go to the lower node order, then the lower card index.

Two ways to find the node, with the same answer (tests compare them): a scan of every node
(small clusters, label selectors, pinned cards, and the reference in ``bench/``) and, for large
clusters, an index per request shape — a sorted list of the nodes the shape fits on, kept up to
date as placements and releases change a node.

The records coming in (``NodeCapacity``, ``CardCapacity``, ``Instance``, ``LaunchRequest``,
``PlacementConfig``) check their fields when made and raise ``TypeError``/``ValueError`` naming
the field; the engine trusts them afterwards.

The package, by what each module holds:

- ``model``: the records coming in and going out (capacities, requests, the configuration,
  reports) and the charge rule, ``instance_charge``;
- ``state``: the working cards, nodes and placements of one pass, and a request's shape;
- ``cluster``: ``Cluster`` (choosing, committing, releasing, reading) and the per-shape index;
- ``explain``: why a request finds no room, and the capacity stranded on cards;
- ``reclaim``: which borrowed sessions to take back to make room for a request;
- ``snapshot``: a ``Cluster`` loaded from, and written back as, a capacity snapshot.
"""

from labs.domain.placement.cluster import Cluster
from labs.domain.placement.model import (
    DEFAULT_CONFIG,
    CardCapacity,
    FragmentationReport,
    Holding,
    Instance,
    LaunchRequest,
    NodeCapacity,
    PlacementConfig,
    Policy,
    ReclaimPlan,
    ScoreWeights,
    SharePolicy,
    StrandedCard,
    instance_charge,
    largest_limit,
)
from labs.domain.placement.state import Choice

__all__ = [
    "DEFAULT_CONFIG",
    "CardCapacity",
    "Choice",
    "Cluster",
    "FragmentationReport",
    "Holding",
    "Instance",
    "LaunchRequest",
    "NodeCapacity",
    "PlacementConfig",
    "Policy",
    "ReclaimPlan",
    "ScoreWeights",
    "SharePolicy",
    "StrandedCard",
    "instance_charge",
    "largest_limit",
]
