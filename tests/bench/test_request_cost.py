"""bench.request_cost on a tiny world: every endpoint answers as expected and is measured."""

from __future__ import annotations

from bench.request_cost import DASHBOARD, DELIVER, FLOOR, LAUNCH, OPS, OPS_JSON, PUBLISH, STOP, build_world, measure, report


def test_every_endpoint_is_timed_and_its_queries_counted(db, capsys):
    world = build_world(students=6)

    costs = measure(world, repeat=2)

    by_name = {c.name: c for c in costs}
    assert {FLOOR, DASHBOARD, LAUNCH, STOP, OPS, OPS_JSON, PUBLISH, DELIVER} <= set(by_name)
    assert all(c.cpu_ms > 0 and c.samples == 2 for c in costs)
    # The floor is the session and the user; every real page reads more than that.
    assert by_name[FLOOR].queries == 2
    assert all(c.queries > 2 for c in costs if c.queries is not None and c.name not in (FLOOR, PUBLISH))
    assert by_name[DELIVER].queries is None
    report(costs, students=6)
    assert "x floor" in capsys.readouterr().out
