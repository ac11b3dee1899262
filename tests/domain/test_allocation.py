from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from labs.domain.allocation import Placed, Refused, Waiting
from labs.domain.allocation import allocate as _allocate
from labs.domain.placement import CardCapacity, Instance, LaunchRequest, NodeCapacity
from labs.domain.quota import CourseQuota, Resources
from labs.domain.reasons import Reason
from labs.domain.units import Scenario


def CourseLimits(core_percent, memory_mib, instances, sessions_per_student):  # noqa: N802 - reads like the old record
    return CourseQuota(Resources(core_percent, memory_mib, instances), sessions_per_student=sessions_per_student)


def allocate(nodes, requests, quotas, student_active):
    return _allocate(nodes, requests, quotas, student_active, now=0.0)


DEV, INF = Scenario.DEVELOPMENT, Scenario.INFERENCE
CARD_MIB = 65536
BIG = CourseLimits(core_percent=100_000, memory_mib=10**9, instances=10_000, sessions_per_student=10_000)


def server(name="n1", cards=8, memory_mib=CARD_MIB, instances=None, healthy=None):
    instances = instances or {}
    healthy = healthy or {}
    return NodeCapacity(
        name,
        tuple(
            CardCapacity(
                card_id=hash((name, i)) & 0xFFFFFF,
                index=i,
                memory_mib=memory_mib,
                healthy=healthy.get(i, True),
                instances=tuple(instances.get(i, ())),
            )
            for i in range(cards)
        ),
    )


def requests(n, core=5, memory=4096, scenario=DEV, course=1, distinct_students=True):
    return [LaunchRequest(f"r{i}", course, i if distinct_students else 0, core, memory, scenario) for i in range(n)]


def test_128_small_sessions_fill_one_server_exactly():
    decisions = allocate([server()], requests(130), {1: BIG}, {})
    placed = [d for d in decisions if isinstance(d, Placed)]
    assert len(placed) == 128
    assert Counter(d.card_indices[0] for d in placed) == {i: 16 for i in range(8)}
    waiting = [d for d in decisions if isinstance(d, Waiting)]
    assert [w.key for w in waiting] == ["r128", "r129"]
    assert waiting[0].reason == Reason.of("node.instances_cap", cap=128, nodes="n1")
    assert "maximum of 128 instances" in str(waiting[0].reason)


def test_medium_sessions_are_bound_by_card_memory():
    decisions = allocate([server()], requests(70, core=10, memory=8192), {1: BIG}, {})
    assert sum(isinstance(d, Placed) for d in decisions) == 64
    reason = decisions[-1].reason
    assert (reason.code, reason.kwargs["need_mib"], reason.kwargs["best_free_mib"]) == ("card.memory", 8192, 0)
    assert str(reason).startswith("card memory: needs 8 GiB; the most free on a healthy card is 0 GiB")


def test_binpack_fills_the_used_card_before_opening_an_empty_one():
    existing = {3: [Instance(5, 4096, DEV)]}
    decisions = allocate([server(instances=existing)], requests(1), {1: BIG}, {})
    assert decisions == [Placed("r0", "n1", (server().cards[3].card_id,), (3,))]


def test_inference_instances_cap_a_card_at_eight():
    decisions = allocate([server(cards=1)], requests(10, core=5, memory=2048, scenario=INF), {1: BIG}, {})
    assert sum(isinstance(d, Placed) for d in decisions) == 8
    assert decisions[-1].reason == Reason.of("card.instances_cap", cap=8)


def test_a_development_instance_cannot_join_a_card_holding_eight_inference_instances():
    existing = {0: [Instance(5, 2048, INF)] * 8}
    decisions = allocate([server(cards=1, instances=existing)], requests(1), {1: BIG}, {})
    assert isinstance(decisions[0], Waiting)


def test_unhealthy_cards_and_unavailable_nodes_are_never_chosen():
    sick = server(cards=2, healthy={0: False})
    down = NodeCapacity("n0", server("n0").cards, available=False)
    decisions = allocate([down, sick], requests(20), {1: BIG}, {})
    assert {d.node for d in decisions if isinstance(d, Placed)} == {"n1"}
    assert {d.card_indices[0] for d in decisions if isinstance(d, Placed)} == {1}


def test_course_quota_stops_admission_with_numbers_in_the_reason():
    limits = {1: CourseLimits(core_percent=800, memory_mib=10**9, instances=32, sessions_per_student=1)}
    decisions = allocate([server()], requests(40), limits, {})
    assert sum(isinstance(d, Placed) for d in decisions) == 32
    assert decisions[32] == Waiting("r32", Reason.of("quota.instances", used=32, limit=32, course=1))
    assert str(decisions[32].reason) == "course quota: 32 of 32 instances in use"


def test_course_usage_already_held_counts_against_the_guarantee():
    limits = {1: CourseLimits(core_percent=20, memory_mib=10**9, instances=100, sessions_per_student=1)}
    held = {0: [Instance(5, 1024, DEV, key=f"old{i}", course_id=1) for i in range(3)]}
    decisions = allocate([server(instances=held)], requests(2), limits, {})
    assert isinstance(decisions[0], Placed)
    assert str(decisions[1].reason) == "course quota: 20 of 20 % core in use; needs 5 % more"


def test_a_student_at_their_limit_waits_while_others_are_admitted():
    limits = {1: CourseLimits(100, 10**9, 100, sessions_per_student=1)}
    reqs = [LaunchRequest("a", 1, 7, 5, 4096, DEV), LaunchRequest("b", 1, 8, 5, 4096, DEV)]
    decisions = allocate([server()], reqs, limits, {(1, 7): 1})
    assert decisions[0] == Waiting("a", Reason.of("student.limit", held=1, limit=1))
    assert str(decisions[0].reason) == "student limit: 1 of 1 concurrent sessions in use"
    assert isinstance(decisions[1], Placed)


def test_a_request_larger_than_any_card_is_refused_not_queued():
    decisions = allocate([server(memory_mib=32768)], requests(1, memory=40960), {1: BIG}, {})
    assert decisions == [Refused("r0", Reason.of("card.too_small", need_mib=40960, largest_mib=32768))]
    assert str(decisions[0].reason) == "card memory: needs 40 GiB; the largest card has 32 GiB"


def test_a_request_larger_than_the_course_guarantee_is_refused():
    limits = {1: CourseLimits(5, 10**9, 10, 1)}
    decisions = allocate([server()], requests(1, core=10), limits, {})
    assert decisions == [Refused("r0", Reason.of("quota.ceiling_core", need=10, limit=5))]
    assert str(decisions[0].reason) == "course quota: needs 10 % core; the course can hold at most 5 %"


def test_a_course_without_quota_is_refused():
    assert isinstance(allocate([server()], requests(1), {}, {})[0], Refused)


def test_one_refusal_does_not_stop_the_rest_of_the_batch():
    reqs = [LaunchRequest("huge", 1, 1, 5, 10**6, DEV), LaunchRequest("ok", 1, 2, 5, 4096, DEV)]
    decisions = allocate([server()], reqs, {1: BIG}, {})
    assert isinstance(decisions[0], Refused) and isinstance(decisions[1], Placed)


def test_the_same_inputs_give_the_same_decisions():
    args = ([server("a"), server("b")], requests(100, core=7, memory=3072), {1: BIG}, {})
    assert allocate(*args) == allocate(*args)


# --- properties -------------------------------------------------------------------------------

request_strategy = st.builds(
    LaunchRequest,
    key=st.uuids().map(str),
    course_id=st.sampled_from([1, 2]),
    student_id=st.integers(0, 20),
    core_percent=st.integers(1, 60),
    memory_mib=st.integers(1, 200).map(lambda u: u * 128),
    scenario=st.sampled_from([DEV, INF]),
)
limits_strategy = st.builds(
    CourseLimits,
    core_percent=st.integers(0, 1600),
    memory_mib=st.integers(0, 2000).map(lambda u: u * 128),
    instances=st.integers(0, 200),
    sessions_per_student=st.integers(1, 3),
)


@settings(max_examples=300, deadline=None)
@given(
    cards=st.integers(1, 8),
    nodes=st.integers(1, 3),
    memory_units=st.sampled_from([256, 512]),
    reqs=st.lists(request_strategy, max_size=150, unique_by=lambda r: r.key),
    limits=st.dictionaries(st.sampled_from([1, 2]), limits_strategy, min_size=1),
)
def test_no_batch_ever_breaks_a_card_node_or_quota_invariant(cards, nodes, memory_units, reqs, limits):
    cluster = [server(f"n{i}", cards=cards, memory_mib=memory_units * 128) for i in range(nodes)]
    decisions = allocate(cluster, reqs, limits, {})
    assert [d.key for d in decisions] == [r.key for r in reqs]
    by_key = {r.key: r for r in reqs}
    per_card: dict[tuple[str, int], list[LaunchRequest]] = {}
    per_course: dict[int, list[LaunchRequest]] = {}
    per_student: Counter = Counter()
    for d in decisions:
        if isinstance(d, Placed):
            r = by_key[d.key]
            per_card.setdefault((d.node, d.card_indices[0]), []).append(r)
            per_course.setdefault(r.course_id, []).append(r)
            per_student[(r.course_id, r.student_id)] += 1
        else:
            assert isinstance(d.reason, Reason) and str(d.reason)  # every non-placement says why
    for placed in per_card.values():
        assert sum(r.core_percent for r in placed) <= 100
        assert sum(r.memory_mib for r in placed) <= memory_units * 128
        cap = 8 if any(r.scenario == INF for r in placed) else 16
        assert len(placed) <= cap
    for node in cluster:
        on_node = [r for (n, _), rs in per_card.items() if n == node.name for r in rs]
        assert len(on_node) <= (64 if any(r.scenario == INF for r in on_node) else 128)
    for course_id, placed in per_course.items():
        limit = limits[course_id].guarantee
        assert sum(r.core_percent for r in placed) <= limit.core_percent
        assert sum(r.memory_mib for r in placed) <= limit.memory_mib
        assert len(placed) <= limit.instances
    for (course_id, _), n in per_student.items():
        assert n <= limits[course_id].sessions_per_student


@settings(max_examples=200, deadline=None)
@given(reqs=st.lists(request_strategy, min_size=1, max_size=60, unique_by=lambda r: r.key))
def test_a_request_waiting_for_capacity_really_fits_on_no_card(reqs):
    cluster = [server("n1", cards=2, memory_mib=32768)]
    unlimited = {1: BIG, 2: BIG}
    decisions = allocate(cluster, reqs, unlimited, {})
    # Every capacity wait must fit on no card as the batch left it.
    used: dict[int, list[LaunchRequest]] = {0: [], 1: []}
    by_key = {r.key: r for r in reqs}
    for d in decisions:
        if isinstance(d, Placed):
            used[d.card_indices[0]].append(by_key[d.key])
    for d in decisions:
        if isinstance(d, Waiting) and d.reason.code != "student.limit":
            r = by_key[d.key]
            for placed in used.values():
                scenarios = [p.scenario for p in placed] + [r.scenario]
                fits_now = (
                    sum(p.core_percent for p in placed) + r.core_percent <= 100
                    and sum(p.memory_mib for p in placed) + r.memory_mib <= 32768
                    and len(placed) + 1 <= (8 if INF in scenarios else 16)
                )
                # Placements only add usage: fitting the final state means it fitted when refused.
                assert not fits_now, d
