"""The simulated week (bench/week.py): the plan is the same for both runs, the stand-in lab answers
the idle check as JupyterLab does, and one short run of the whole harness (marked slow) ends with
every allocation released and the figures printed."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import timedelta

import pytest

from bench.harness import ROOT, Resources
from bench.week import LABS, MEETINGS, MONDAY, Visit, plan_week, start_stand_in_labs


def test_the_plan_depends_on_the_seed_only():
    first, again, other = plan_week(10, 4, seed=3), plan_week(10, 4, seed=3), plan_week(10, 4, seed=4)

    assert [(v.who, v.start, v.stop, v.busy) for v in first] == [(v.who, v.start, v.stop, v.busy) for v in again]
    assert [(v.who, v.start) for v in first] != [(v.who, v.start) for v in other]
    assert [v.start for v in first] == sorted(v.start for v in first)


def test_meeting_visits_start_in_the_first_five_minutes_of_a_meeting_and_research_works_weekdays():
    visits = plan_week(40, 8, seed=1)
    starts = {MONDAY + timedelta(days=d, hours=h, minutes=m) for d, h, m in MEETINGS}

    meeting = [v for v in visits if v.meeting]
    assert meeting and all(any(s <= v.start <= s + timedelta(minutes=5) for s in starts) for v in meeting)
    assert len(meeting) <= 2 * 40
    research = [v for v in visits if v.course == "RESEARCH"]
    assert len(research) == 8 * 5 and all(v.start.weekday() < 5 and 9 <= v.start.hour < 10 for v in research)
    assert all(a < b for v in visits for a, b in v.busy)
    # Some labs are left open: what the culler is for.
    assert any(v.stop is None for v in meeting) and any(v.stop is not None for v in meeting)


def _get(url: str, token: str | None = "token secret"):
    request = urllib.request.Request(url, headers={"Authorization": token} if token else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_the_stand_in_lab_reports_a_busy_kernel_inside_a_burst_and_the_last_activity_after_it():
    import time_machine

    res = Resources()
    try:
        template = start_stand_in_labs(res)
        start = MONDAY + timedelta(hours=9)
        burst = (start + timedelta(minutes=10), start + timedelta(minutes=30))
        LABS["s1"] = Visit("someone", "CLASS", start, None, [burst])
        url = template.format(session_id="s1")
        with time_machine.travel(burst[0] + timedelta(minutes=5), tick=False):
            assert _get(url + "api/kernels")[0]["execution_state"] == "busy"
        with time_machine.travel(burst[1] + timedelta(minutes=45), tick=False):
            assert _get(url + "api/kernels")[0]["execution_state"] == "idle"
            assert _get(url + "api/status")["last_activity"] == burst[1].isoformat()
        with pytest.raises(urllib.error.HTTPError):  # the idle check always sends the lab's token
            _get(url + "api/status", token=None)
        with pytest.raises(urllib.error.HTTPError):
            _get(template.format(session_id="unknown") + "api/status")
    finally:
        LABS.clear()
        res.close()


@pytest.mark.slow
def test_a_short_simulated_week_runs_end_to_end():
    done = subprocess.run(
        [sys.executable, "-m", "bench.week", "--students", "3", "--researchers", "1", "--days", "2", "--seed", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert "NPU card-hours held (usage ledger)" in done.stdout
    assert "class at meetings: launch -> running p50" in done.stdout
    assert "baseline / policies:" in done.stdout
