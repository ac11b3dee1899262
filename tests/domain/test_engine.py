"""The placement and quota engine: unit cases and properties over random clusters and sequences."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labs.domain.allocation import Allocator, Placed, Refused, Waiting, allocate, request_resources
from labs.domain.placement import (
    CardCapacity,
    Cluster,
    Instance,
    LaunchRequest,
    NodeCapacity,
    PlacementConfig,
    Policy,
    ScoreWeights,
    SharePolicy,
)
from labs.domain.quota import CourseQuota, QuotaLedger, Resources
from labs.domain.reasons import Reason
from labs.domain.units import Scenario

DEV, INF = Scenario.DEVELOPMENT, Scenario.INFERENCE
GIB = 1024
UNLIMITED = CourseQuota(Resources(10**6, 10**9, 10**6), sessions_per_student=10**6)


def node(name, cards=8, memory_mib=64 * GIB, labels=None, granule=128, healthy=None, instances=None, available=True):
    healthy = healthy or {}
    instances = instances or {}
    return NodeCapacity(
        name,
        tuple(
            CardCapacity(
                card_id=abs(hash((name, i))) % 10**9,
                index=i,
                memory_mib=memory_mib,
                healthy=healthy.get(i, True),
                die_id=f"{name}-die{i}",
                instances=tuple(instances.get(i, ())),
            )
            for i in range(cards)
        ),
        available=available,
        labels=labels or {},
        memory_granule_mib=granule,
    )


def req(key, core=5, memory=4 * GIB, course=1, student=None, **extra):
    return LaunchRequest(key, course, student if student is not None else hash(key) % 10**6, core, memory, **extra)


# --- placement policies ---------------------------------------------------------------------


def test_binpack_fills_the_busiest_node_and_card_first():
    busy = node("b", instances={2: [Instance(50, 8 * GIB, DEV)]})
    decisions = allocate([node("a"), busy], [req("r")], {1: UNLIMITED}, {}, now=0)
    assert decisions == [Placed("r", "b", (busy.cards[2].card_id,), (2,))]


def test_spread_at_both_levels_picks_the_emptiest_node_and_card():
    busy = node("b", instances={0: [Instance(50, 8 * GIB, DEV)]})
    config = PlacementConfig(node_policy=Policy.SPREAD, card_policy=Policy.SPREAD)
    decisions = allocate(
        [busy, node("a", instances={0: [Instance(5, GIB, DEV)]})], [req("r")], {1: UNLIMITED}, {}, now=0, config=config
    )
    assert decisions[0].node == "a" and decisions[0].card_indices == (1,)


def test_policies_can_differ_between_node_and_card_level():
    a = node("a", instances={0: [Instance(10, GIB, DEV)], 1: [Instance(40, GIB, DEV)]})
    config = PlacementConfig(node_policy=Policy.BINPACK, card_policy=Policy.SPREAD)
    decisions = allocate([a, node("b")], [req("r")], {1: UNLIMITED}, {}, now=0, config=config)
    assert decisions[0].node == "a" and decisions[0].card_indices == (2,)


def test_a_request_may_override_the_configured_policy():
    decisions = allocate(
        [node("a", instances={0: [Instance(10, GIB, DEV)]}), node("b")],
        [req("r", node_policy=Policy.SPREAD)],
        {1: UNLIMITED},
        {},
        now=0,
    )
    assert decisions[0].node == "b"


def test_score_weights_change_which_card_binpack_prefers():
    many_small = [Instance(1, 128, DEV)] * 10
    one_big = [Instance(60, 128, DEV)]
    cluster = node("a", cards=2, instances={0: many_small, 1: one_big})
    by_count = PlacementConfig(weights=ScoreWeights(10, 0, 0))
    by_core = PlacementConfig(weights=ScoreWeights(0, 10, 0))
    assert allocate([cluster], [req("r")], {1: UNLIMITED}, {}, now=0, config=by_count)[0].card_indices == (0,)
    assert allocate([cluster], [req("r")], {1: UNLIMITED}, {}, now=0, config=by_core)[0].card_indices == (1,)


def test_multi_card_requests_take_whole_empty_cards_on_one_node():
    a = node("a", cards=4, instances={0: [Instance(5, GIB, DEV)]})
    b = node("b", cards=2)
    decisions = allocate([a, b], [req("r", core=300, memory=32 * GIB, cards=3)], {1: UNLIMITED}, {}, now=0)
    assert decisions[0].node == "a" and decisions[0].card_indices == (1, 2, 3)
    nothing_left = allocate(
        [a, b], [req("x", core=300, memory=GIB, cards=3), req("y", core=300, memory=GIB, cards=3)], {1: UNLIMITED}, {}, now=0
    )
    assert isinstance(nothing_left[1], Waiting)
    assert nothing_left[1].reason == Reason.of("whole_cards.free", cards=3, free=2, node="b")
    assert str(nothing_left[1].reason) == "whole cards: needs 3 free cards on one node; the most on a node is 2 (node b)"


def test_multi_card_core_must_be_100_per_card():
    decisions = allocate([node("a")], [req("r", core=150, memory=GIB, cards=2)], {1: UNLIMITED}, {}, now=0)
    assert decisions == [Refused("r", Reason.of("whole_cards.core", cards=2, need_percent=200, core_percent=150))]
    assert str(decisions[0].reason) == "whole cards: 2 cards need core 200 %, not 150 %"


def test_a_whole_card_leaves_no_room_on_it():
    a = node("a", cards=2)
    decisions = allocate(
        [a],
        [req("w", core=200, memory=GIB, cards=2), req("s", core=0, memory=128, share_policy=SharePolicy.BEST_EFFORT)],
        {1: UNLIMITED},
        {},
        now=0,
    )
    assert isinstance(decisions[0], Placed) and isinstance(decisions[1], Waiting)


def test_best_effort_has_no_floor_and_fits_on_a_card_with_no_core_left():
    full = node("a", cards=1, instances={0: [Instance(100, 8 * GIB, DEV)]})
    be = req("r", core=0, memory=GIB, share_policy=SharePolicy.BEST_EFFORT)
    assert isinstance(allocate([full], [be], {1: UNLIMITED}, {}, now=0)[0], Placed)
    assert allocate([full], [req("z", core=0, memory=GIB)], {1: UNLIMITED}, {}, now=0) == [
        Refused("z", Reason.of("core.range", core_percent=0, max_percent=100))
    ]


def test_a_node_label_selector_limits_the_nodes():
    nodes = [node("a", labels={"pool": "cpu-heavy"}), node("b", labels={"pool": "teaching"})]
    decisions = allocate(nodes, [req("r", node_selector=(("pool", "teaching"),))], {1: UNLIMITED}, {}, now=0)
    assert decisions[0].node == "b"
    missing = allocate(nodes, [req("x", node_selector=(("pool", "gpu"),))], {1: UNLIMITED}, {}, now=0)
    assert missing == [Waiting("x", Reason.of("node.selector", labels="pool=gpu"))]
    assert str(missing[0].reason) == "node selector: no available node has the labels pool=gpu"


def test_a_pinned_card_is_used_or_the_reason_names_it():
    nodes = [node("a"), node("b")]
    assert allocate(nodes, [req("r", die_id="b-die5")], {1: UNLIMITED}, {}, now=0)[0].card_indices == (5,)
    sick = [node("a", healthy={3: False})]
    decisions = allocate(sick, [req("r", die_id="a-die3")], {1: UNLIMITED}, {}, now=0)
    assert str(decisions[0].reason) == "pinned card: the card with die id a-die3 (node a, card 3) is unhealthy"


def test_memory_must_match_the_node_profiles_granularity():
    vnpu = node("v", granule=1024)
    decisions = allocate([vnpu], [req("r", memory=1536), req("s", memory=2048)], {1: UNLIMITED}, {}, now=0)
    assert decisions[0] == Refused("r", Reason.of("memory.granularity", memory_mib=1536, step_mib=1024))
    assert isinstance(decisions[1], Placed)


def test_an_unavailable_node_is_never_chosen():
    decisions = allocate([node("a", available=False), node("b")], [req(f"r{i}") for i in range(20)], {1: UNLIMITED}, {}, now=0)
    assert {d.node for d in decisions} == {"b"}


def test_a_template_the_course_does_not_allow_is_refused():
    quota = CourseQuota(Resources(100, 10**6, 10), allowed_templates=frozenset({7}))
    decisions = allocate([node("a")], [req("r", template_id=8), req("s", template_id=7)], {1: quota}, {}, now=0)
    assert decisions[0] == Refused("r", Reason.of("template.not_offered"))
    assert isinstance(decisions[1], Placed)


def test_fragmentation_reports_capacity_stranded_on_full_cards():
    full_by_count = [Instance(1, 1024, DEV)] * 16  # 84 % core and 48 GiB left, but no slot
    full_by_memory = [Instance(10, 64 * GIB - 64, DEV)]
    cluster = Cluster([node("a", cards=3, instances={0: full_by_count, 1: full_by_memory})])
    report = cluster.fragmentation()
    assert report.stranded_core_percent == 84 + 90
    assert report.stranded_memory_mib == 48 * GIB + 64
    assert [(c.card_index, str(c.why)) for c in report.cards] == [
        (0, "holds its maximum of 16 instances"),
        (1, "has 0.063 GiB free, less than one 0.125 GiB step"),
    ]
    assert report.cards[1].why == Reason.of("stranded.memory_step", free_mib=64, step_mib=128)


# --- quota: guarantee, borrowing, lending ---------------------------------------------------------


def cohort_quota(core, instances, *, cohort="dept", borrow=None, lend=None, per_student=10):
    return CourseQuota(
        Resources(core, 10**6, instances),
        cohort=cohort,
        borrowing_limit=borrow,
        lending_limit=lend,
        sessions_per_student=per_student,
    )


def test_a_course_borrows_what_its_cohort_has_idle_and_is_marked_borrowed():
    quotas = {1: cohort_quota(10, 2), 2: cohort_quota(10, 2)}
    decisions = allocate([node("a")], [req(f"r{i}", course=1) for i in range(5)], quotas, {}, now=0)
    assert [isinstance(d, Placed) and d.borrowed for d in decisions] == [False, False, True, True, False]
    assert decisions[4].reason == Reason.of("cohort.core", cohort="dept", over=15, idle=10, course=1)
    assert str(decisions[4].reason) == (
        "cohort dept: needs 15 % core beyond the course's guarantee; 10 % core is idle and lendable"
    )


def test_the_lending_limit_caps_what_others_may_borrow():
    quotas = {1: cohort_quota(10, 2), 2: cohort_quota(10, 4, lend=Resources(5, 10**6, 1))}
    decisions = allocate([node("a")], [req(f"r{i}", course=1) for i in range(4)], quotas, {}, now=0)
    assert sum(isinstance(d, Placed) for d in decisions) == 3


def test_the_borrowing_limit_caps_what_a_course_may_borrow():
    quotas = {1: cohort_quota(10, 2, borrow=Resources(5, 10**6, 1)), 2: cohort_quota(50, 10)}
    decisions = allocate([node("a")], [req(f"r{i}", course=1) for i in range(4)], quotas, {}, now=0)
    assert sum(isinstance(d, Placed) for d in decisions) == 3
    assert str(decisions[3].reason) == (
        "course quota: 15 % core in use of a guarantee of 10 plus a borrowing limit of 5; needs 5 more"
    )


def test_a_course_without_a_cohort_never_borrows():
    quotas = {1: CourseQuota(Resources(10, 10**6, 2), sessions_per_student=9), 2: cohort_quota(50, 10)}
    decisions = allocate([node("a")], [req(f"r{i}", course=1) for i in range(3)], quotas, {}, now=0)
    assert decisions[2] == Waiting("r2", Reason.of("quota.instances", used=2, limit=2, course=1))


def test_admission_inside_a_guarantee_beats_borrowing_in_the_same_batch():
    # One card with room for two; course 1 asks to borrow first, course 2 within its guarantee after.
    tiny = [node("a", cards=1, memory_mib=8 * GIB)]
    quotas = {1: cohort_quota(0, 0), 2: cohort_quota(10, 2)}
    quotas[1] = CourseQuota(Resources(0, 0, 0), cohort="dept", sessions_per_student=9)
    decisions = allocate(tiny, [req("borrower", course=1), req("owner1", course=2), req("owner2", course=2)], quotas, {}, now=0)
    assert isinstance(decisions[1], Placed) and isinstance(decisions[2], Placed)
    assert isinstance(decisions[0], Waiting)


def test_cohort_sums_stay_consistent_through_charges_and_refunds():
    quotas = {c: cohort_quota(20, 4) for c in (1, 2, 3)}
    ledger = QuotaLedger(quotas, {})
    rng = random.Random(1)
    held = {1: [], 2: [], 3: []}
    for _ in range(2000):
        course = rng.choice([1, 2, 3])
        if held[course] and rng.random() < 0.4:
            ledger.refund(course, held[course].pop())
        else:
            amount = Resources(rng.randint(1, 10), 128, 1)
            admission = ledger.check(course, amount)
            if admission.admitted:
                ledger.charge(course, amount)
                held[course].append(amount)
                # In every resource this course now borrows, borrowing took only idle guarantee,
                # so the cohort holds no more than the sum of its guarantees there. (Admission
                # inside a guarantee may exceed that sum; reclaim is what gives it back.)
                total = sum((u for u in ledger.usage.values()), Resources())
                for i, (used, nominal) in enumerate(zip(ledger.usage[course], quotas[course].guarantee, strict=True)):
                    if admission.borrowing and used > nominal:
                        assert total[i] <= 3 * nominal, (i, total, ledger.usage)
        fresh = QuotaLedger(quotas, ledger.usage)
        assert ledger._cohorts == fresh._cohorts


# --- reclaim ------------------------------------------------------------------------------------


def test_reclaim_plans_the_fewest_newest_borrowed_sessions_of_other_courses():
    quotas = {1: cohort_quota(50, 10, per_student=99), 2: cohort_quota(50, 10, per_student=99)}
    # Course 2 fills the card: 5 within its guarantee (50 %), 5 borrowed from course 1.
    instances = [Instance(10, GIB, DEV, key=f"c2-{i}", course_id=2, started_at=float(i * 100)) for i in range(10)]
    cluster = [node("a", cards=1, instances={0: instances})]
    decisions = allocate(cluster, [req("mine", core=20, course=1)], quotas, {}, now=10_000)
    wait = decisions[0]
    assert isinstance(wait, Waiting)
    assert wait.reclaim.victims == ("c2-9", "c2-8")  # newest first, just enough for 20 %
    assert (wait.reason.code, wait.reason.kwargs["victims"]) == ("reclaim.possible", 2)
    assert wait.reason.kwargs["reason"].code == "card.core"
    assert str(wait.reason).endswith("2 borrowed session(s) of other courses can be reclaimed to make room")


def test_reclaim_never_takes_a_session_younger_than_the_minimum_runtime():
    quotas = {1: cohort_quota(50, 10, per_student=99), 2: cohort_quota(50, 10, per_student=99)}
    instances = [Instance(10, GIB, DEV, key=f"c2-{i}", course_id=2, started_at=float(i * 100)) for i in range(10)]
    cluster = [node("a", cards=1, instances={0: instances})]
    decisions = allocate(
        cluster, [req("mine", core=20, course=1)], quotas, {}, now=1_300, config=PlacementConfig(min_runtime_seconds=600)
    )
    # c2-7 (age 600) and older may go; c2-8 and c2-9 are too young; c2-0..c2-4 are guaranteed.
    assert decisions[0].reclaim.victims == ("c2-7", "c2-6")


def test_reclaim_never_takes_a_session_inside_its_own_courses_guarantee():
    quotas = {1: cohort_quota(50, 10, per_student=99), 2: cohort_quota(100, 10, per_student=99)}
    instances = [Instance(10, GIB, DEV, key=f"c2-{i}", course_id=2, started_at=float(i)) for i in range(10)]
    decisions = allocate([node("a", cards=1, instances={0: instances})], [req("mine", course=1)], quotas, {}, now=10_000)
    assert isinstance(decisions[0], Waiting) and decisions[0].reclaim is None


# --- properties -----------------------------------------------------------------------------------

TEMPLATES = [(5, 4 * GIB, DEV), (10, 8 * GIB, DEV), (25, 16 * GIB, INF), (1, 512, DEV), (50, 30 * GIB, INF)]


def random_cluster(rng: random.Random, nodes: int) -> list[NodeCapacity]:
    result = []
    for n in range(nodes):
        cards = rng.randint(1, 8)
        memory = rng.choice([32 * GIB, 64 * GIB])
        healthy = {i: rng.random() > 0.1 for i in range(cards)}
        result.append(node(f"n{n:03d}", cards=cards, memory_mib=memory, healthy=healthy, available=rng.random() > 0.05))
    return result


def brute_force_fits(cluster: Cluster, request: LaunchRequest) -> list[tuple[str, int]]:
    core, memory, inference = request.core_percent, request.memory_mib, request.scenario == INF
    fits = []
    for n in cluster.nodes:
        if not n.available or memory % n.granule:
            continue
        node_cap = 64 if inference or n.inference else 128
        if n.count >= node_cap:
            continue
        for c in n.cards:
            card_cap = 8 if inference or c.inference else 16
            if c.healthy and c.core_used + core <= 100 and c.memory_used + memory <= c.memory_mib and c.count < card_cap:
                fits.append((n.name, c.index))
    return fits


def card_of(cluster: Cluster, name: str, index: int):
    return next(c for n in cluster.nodes if n.name == name for c in n.cards if c.index == index)


def check_reason_names_a_real_constraint(cluster: Cluster, request: LaunchRequest, reason: Reason) -> None:
    params = reason.kwargs
    inference = request.scenario == INF
    if reason.code == "card.instances_cap":  # the cap quoted binds on every healthy card of an open node
        for n in cluster.nodes:
            if n.available and n.has_room(inference):
                for c in n.cards:
                    if c.healthy:
                        assert c.count >= params["cap"] == (8 if inference or c.inference else 16), reason
        return
    if reason.code == "node.instances_cap":
        for n in cluster.nodes:
            if n.available and request.memory_mib % n.granule == 0:
                assert n.count + request.cards > params["cap"] == n.cap(inference), reason
        return
    if reason.code in ("card.core", "card.memory"):
        card = card_of(cluster, params["node"], params["card"])
        if reason.code == "card.core":
            need, free, actual = params["need_percent"], params["best_free_percent"], 100 - card.core_used
        else:
            need, free, actual = params["need_mib"], params["best_free_mib"], card.memory_mib - card.memory_used
        assert free == actual < need, reason
        return
    assert reason.code.split(".")[0] in {"card", "node", "capacity", "memory", "whole_cards"}, reason


def random_request(rng: random.Random, key: str, course_id: int, student_id: int) -> LaunchRequest:
    """A template launch; now and then a best-effort one or one on two or three whole cards."""
    roll = rng.random()
    if roll < 0.1:
        return LaunchRequest(key, course_id, student_id, 0, 512, DEV, share_policy=SharePolicy.BEST_EFFORT)
    if roll < 0.15:
        cards = rng.choice([2, 3])
        return LaunchRequest(key, course_id, student_id, 100 * cards, 16 * GIB, rng.choice([DEV, INF]), cards=cards)
    core, memory, scenario = rng.choice(TEMPLATES)
    return LaunchRequest(key, course_id, student_id, core, memory, scenario)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    nodes=st.integers(1, 6),
    policy=st.sampled_from(list(Policy)),
    weights=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
)
def test_thousands_of_launches_and_stops_never_break_an_invariant(seed, nodes, policy, weights):
    rng = random.Random(seed)
    config = PlacementConfig(node_policy=policy, card_policy=policy, weights=ScoreWeights(*weights))
    cluster = Cluster(random_cluster(rng, nodes), config)
    quotas = {
        1: cohort_quota(rng.randint(0, 400), rng.randint(0, 40), per_student=3),
        2: cohort_quota(rng.randint(0, 400), rng.randint(0, 40), per_student=3, borrow=Resources(50, 10**6, 5)),
        3: CourseQuota(Resources(rng.randint(0, 400), 10**9, rng.randint(0, 40)), sessions_per_student=3),
    }
    allocator = Allocator(cluster, quotas, {}, now=0)
    live: list[LaunchRequest] = []
    for step in range(250):
        if live and rng.random() < 0.35:
            gone = live.pop(rng.randrange(len(live)))
            assert allocator.release(gone.key)
            continue
        request = random_request(rng, f"s{step}", rng.choice([1, 2, 3]), rng.randint(0, 30))
        before = [(c.count, c.core_used) for n in cluster.nodes for c in n.cards]
        could_fit = brute_force_fits(cluster, request) if request.cards == 1 else []
        partly_used_fit = [(name, index) for name, index in could_fit if card_of(cluster, name, index).count > 0]
        (decision,) = allocator.decide([request])
        cluster.check_invariants()
        for course_id, quota in quotas.items():
            ceiling = quota.ceiling()
            if ceiling is not None:
                assert allocator.ledger.usage[course_id].fits_in(ceiling)
        if isinstance(decision, Placed):
            live.append(request)
            if policy == Policy.BINPACK and partly_used_fit:
                (index,) = decision.card_indices
                flat = [(n.name, c.index) for n in cluster.nodes for c in n.cards]
                was_empty = before[flat.index((decision.node, index))][0] == 0
                assert not was_empty, "binpack opened an empty card while a partly used one fitted"
        elif isinstance(decision, Waiting) and decision.reason.code.split(".")[0] not in ("quota", "cohort", "student"):
            if request.cards == 1:
                assert not could_fit, f"refused for capacity but fits on {could_fit[:3]}: {decision.reason}"
            check_reason_names_a_real_constraint(cluster, request, decision.reason)
    # One charge rule: the ledger, the cluster's own count and a snapshot round trip agree.
    usage = cluster.usage_by_course()
    for course_id in quotas:
        assert tuple(allocator.ledger.usage[course_id]) == usage.get(course_id, (0, 0, 0))
    held = Counter((r.course_id, r.student_id) for r in live)
    assert {k: v for k, v in allocator.active.items() if v} == dict(held)
    again = Cluster(cluster.snapshot(), config)
    assert again.snapshot() == cluster.snapshot() and again.usage_by_course() == usage
    for request in live:
        assert again.release(request.key)
    assert all(c.count == c.core_used == c.memory_used == 0 for n in again.nodes for c in n.cards)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), node_policy=st.sampled_from(list(Policy)), card_policy=st.sampled_from(list(Policy)))
def test_the_index_chooses_exactly_what_a_full_scan_chooses(seed, node_policy, card_policy):
    rng = random.Random(seed)
    shape = random_cluster(rng, 40)
    config = PlacementConfig(node_policy=node_policy, card_policy=card_policy, index_min_nodes=0)
    indexed = Cluster(shape, config)
    live = []
    for step in range(300):
        if live and rng.random() < 0.3:
            key = live.pop(rng.randrange(len(live)))
            indexed.release(key)
            continue
        request = random_request(rng, f"s{step}", 1, step)
        by_index = indexed.choose(request)
        by_scan = indexed.choose_by_scan(request)
        assert (by_index is None) == (by_scan is None)
        if by_index is not None:
            assert (by_index.node.name, [c.index for c in by_index.cards]) == (
                by_scan.node.name,
                [c.index for c in by_scan.cards],
            )
            indexed.commit(request, by_index)
            live.append(request.key)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_a_course_within_its_guarantee_is_admitted_after_its_reclaim_plan_runs(seed):
    rng = random.Random(seed)
    quotas = {
        1: cohort_quota(rng.randint(50, 400), rng.randint(5, 40), per_student=99),
        2: cohort_quota(rng.randint(0, 200), rng.randint(0, 20), per_student=99),
        3: cohort_quota(rng.randint(0, 200), rng.randint(0, 20), per_student=99),
    }
    cluster = Cluster([node(f"n{i}", cards=rng.randint(1, 4)) for i in range(rng.randint(1, 3))])
    allocator = Allocator(cluster, quotas, {}, now=0)
    # Courses 2 and 3 fill the cluster, borrowing from course 1's idle guarantee.
    for step in range(400):
        allocator.now = float(step)
        allocator.decide([random_request(rng, f"o{step}", rng.choice([2, 3]), step)])
    allocator.now = 10_000.0
    for step in range(40):
        request = random_request(rng, f"m{step}", 1, step)
        card_mib = cluster.whole_card_memory(request.memory_mib) if request.cards > 1 else 0
        admission = allocator.ledger.check(1, request_resources(request, card_mib))
        (decision,) = allocator.decide([request])
        if not (isinstance(decision, Waiting) and decision.reclaim):
            continue
        assert admission.admitted and not admission.borrowing
        for victim in decision.reclaim.victims:
            instance, _ = cluster.placement_of(victim)
            assert instance.course_id in (2, 3)
            assert victim in allocator.borrowed_now()
        for victim in decision.reclaim.victims:
            assert allocator.release(victim)
        (again,) = allocator.decide([dataclasses.replace(request, key=f"m{step}-again", student_id=10_000 + step)])
        assert isinstance(again, Placed), again
        cluster.check_invariants()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_a_class_s_reclaim_plans_name_each_victim_once_and_seat_the_whole_class(seed):
    """A batch of one template for a course within its guarantee: the plans of the batch never
    name a victim twice, and once every named victim has stopped, every planned request fits."""
    rng = random.Random(seed)
    quotas = {
        1: cohort_quota(rng.randint(50, 800), rng.randint(5, 60), per_student=99),
        2: cohort_quota(rng.randint(0, 200), rng.randint(0, 20), per_student=99),
    }
    cluster = Cluster([node(f"n{i}", cards=rng.randint(1, 3)) for i in range(rng.randint(1, 2))])
    allocator = Allocator(cluster, quotas, {}, now=0)
    for step in range(300):
        allocator.now = float(step)
        allocator.decide([random_request(rng, f"o{step}", 2, step)])
    allocator.now = 10_000.0
    core, memory, scenario = rng.choice(TEMPLATES)
    batch = [LaunchRequest(f"m{i}", 1, i, core, memory, scenario) for i in range(rng.randint(2, 40))]
    decisions = allocator.decide(batch)
    plans = [d for d in decisions if isinstance(d, Waiting) and d.reclaim]
    victims = [victim for d in plans for victim in d.reclaim.victims]
    assert len(victims) == len(set(victims)), "a victim named by two plans"
    planned = {d.key for d in plans}
    for victim in victims:
        assert allocator.release(victim)
    again = allocator.decide([dataclasses.replace(r, key=f"{r.key}-again") for r in batch if r.key in planned])
    assert all(isinstance(d, Placed) for d in again), again
    cluster.check_invariants()


def test_a_request_behind_a_planned_one_does_not_take_the_room_it_waits_for():
    """A card with 10 % free and a borrowed 30 % lab: the first request (30 %) waits for the
    reclaim, which with the free 10 % seats it; a 10 % request behind it in the queue does not
    take that 10 % now (the first would find its room short when its victim stops)."""
    quotas = {1: cohort_quota(100, 10), 2: cohort_quota(60, 2)}
    cluster = Cluster([node("a", cards=1)])
    allocator = Allocator(cluster, quotas, {}, now=0)
    assert all(isinstance(d, Placed) for d in allocator.decide([req(f"o{i}", core=30, course=2) for i in range(3)]))
    allocator.now = 10_000.0
    first, behind = allocator.decide([req("m0", core=40, course=1), req("m1", core=10, course=1, student=2)])
    assert isinstance(first, Waiting) and first.reclaim.victims == ("o2",)
    assert isinstance(behind, Waiting) and not behind.reclaim


def test_explanations_never_claim_a_full_cluster_that_is_not():
    with pytest.raises(AssertionError):
        cluster = Cluster([node("a")])
        check_reason_names_a_real_constraint(
            cluster, req("r"), Reason.of("card.memory", need_mib=8192, best_free_mib=0, node="a", card=0)
        )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_explanations_from_sorted_summaries_match_the_full_scan(seed):
    rng = random.Random(seed)
    cluster = Cluster(random_cluster(rng, rng.randint(1, 30)))
    live = []
    for step in range(400):
        if live and rng.random() < 0.25:
            cluster.release(live.pop(rng.randrange(len(live))))
            continue
        core, memory, scenario = rng.choice(TEMPLATES)
        request = LaunchRequest(f"s{step}", 1, step, core, memory, scenario)
        choice = cluster.choose(request)
        if choice is None:
            fast = cluster._explain(request)
            cluster._single_granule = False
            slow = cluster._explain(request)
            cluster._single_granule = True
            assert fast == slow
        else:
            cluster.commit(request, choice)
            live.append(request.key)


def test_a_cluster_of_mixed_memory_steps_still_explains_a_miss():
    full = [Instance(100, 1024, DEV)]
    nodes = [node("f", cards=1, instances={0: full}), node("v", cards=1, granule=1024, instances={0: full})]
    decisions = allocate(nodes, [req("r", core=10, memory=2048)], {1: UNLIMITED}, {}, now=0)
    assert str(decisions[0].reason) == "card core: needs 10 %; the most free on a healthy card is 0 % (node f, card 0)"
