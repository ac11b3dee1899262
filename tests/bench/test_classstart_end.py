"""The class start's end: where the time after the last launch's answer went."""

from __future__ import annotations

import pytest

from bench.classstart.report import report
from bench.classstart.run import class_end
from tests.bench.test_poll import PORTAL_ARGS, PORTAL_FIGURES


def test_the_end_of_a_class_start_is_timed_from_the_last_answer_and_counts_the_admitting_passes():
    # Two passes: two sessions admitted at 10.0, three at 12.5 (the last answer at 12.0).
    events = [
        (10.0, 10.1, 11.2),
        (10.0, 10.1, 11.3),
        (12.5, 12.6, 13.7),
        (12.5, 12.9, 14.0),
        (12.5, 12.7, 13.9),
    ]
    end = class_end(events, last_answered=12.0, last_seen=14.2)
    assert end["end_admitted"] == pytest.approx(0.5)
    assert end["end_create_sent"] == pytest.approx(0.9)
    assert end["end_running"] == pytest.approx(2.0)
    assert end["end_seen"] == pytest.approx(2.2)
    assert (end["admitting_passes"], end["last_pass_admitted"]) == (2, 3)


def test_a_class_start_that_admitted_nothing_has_no_end_to_time():
    end = class_end([(None, None, None)], last_answered=3.0, last_seen=None)
    assert end == {
        "end_admitted": None,
        "end_create_sent": None,
        "end_running": None,
        "end_seen": None,
        "admitting_passes": 0,
        "last_pass_admitted": 0,
    }


def test_the_report_prints_the_end_after_the_last_answer(capsys):
    end = class_end([(10.0, 10.1, 11.2), (12.5, 12.9, 14.0)], last_answered=12.0, last_seen=14.2)
    report({**PORTAL_FIGURES, **end}, PORTAL_ARGS)
    out = capsys.readouterr().out
    assert (
        "after the last launch's answer: the last session admitted +0.50 s (the class in 2 allocation passes, the last "
        "admitting 1), the last create sent +0.90 s, the last running in the portal +2.00 s, seen running through the "
        "API +2.20 s"
    ) in out
