"""The statements written out for speed (usage spans, the sessions a publish or the dashboard
reads, the dashboard's enrolments, endpoint links and budget grants, a session's owner or
teacher, whether a webhook subscription is there, the session store's read, whether an LMS score
waits, an API request's token) on SQLite, the embedded demo's database. The rest of the suite
runs them on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, child_env

SCRIPT = Path(__file__).with_name("sqlite_written.py")


def test_the_written_out_statements_answer_as_the_orm_on_sqlite(tmp_path):
    env = child_env(DATABASE_URL=f"sqlite:///{tmp_path / 'portal.sqlite3'}", PORTAL_VAR_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {
        "vendor": "sqlite",
        "spans": 4,  # the ended session's record, the open one's allocation, the claimed one's two parts
        "spans_agree": True,
        "events_agree": True,  # the sessions a publish reads, as their payloads show them
        "dashboard_agrees": True,
        "enrolments_agree": True,  # the dashboard's courses, quotas and templates
        "endpoints_agree": True,  # the courses with a model endpoint among the user's
        "grants_agree": True,  # the week's budget grants
        "owner": True,
        "teacher": True,
        "stranger": False,
        "session_loads": True,
        "subscribed_before": False,
        "subscribed_after": True,
        "score_waits": [True, False],  # the LMS score an end makes due: the session with one, then without
        "places_agree": True,  # queue places, each course's queue numbered in the pass's order
        "token_agrees": True,  # an API request's token, with its institution
    }
