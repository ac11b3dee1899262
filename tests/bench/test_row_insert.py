"""bench.row_insert on a tiny world: both ways timed, their rows rolled back after."""

from __future__ import annotations

from bench.request_cost import build_world
from bench.row_insert import measure
from labs.models import LabSession


def test_both_ways_are_timed_on_rows_rolled_back_after(db, capsys):
    world = build_world(students=3)
    before = LabSession.objects.count()

    assert measure(world, rows=5, rounds=2) == 0

    out = capsys.readouterr().out
    assert "5 rows x 2 rounds" in out
    assert "objects.create" in out and "row_insert " in out and "ratio row_insert / objects.create" in out
    assert LabSession.objects.count() == before  # each round's rows were rolled back
