"""Migration 0020 gives budget warnings stored before it the parameters their new words name."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from labs.models import LabSession

BEFORE = [("labs", "0019_usage_split_at_the_claim")]
AFTER = [("labs", "0020_budget_reasons_say_the_grace")]
STOP_AT = datetime.fromisoformat("2026-11-03T10:42:00+00:00")


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.mark.django_db(transaction=True)
def test_stored_budget_warnings_are_drawn_with_the_grace_after_the_migration(settings):
    settings.LAB_BUDGET_GRACE_SECONDS = 300
    old = migrate(BEFORE)
    institution = old.get_model("labs", "Institution").objects.create(name="Old University", slug="old")
    course = old.get_model("labs", "Course").objects.create(institution=institution, code="AI101", title="t", term="t")
    template = old.get_model("labs", "LabTemplate").objects.create(
        institution=institution, name="lab", slug="lab", image="lab:1", core_percent=10, memory_mib=8192
    )
    student = old.get_model("auth", "User").objects.create(username="student")
    Session = old.get_model("labs", "LabSession")
    common = {"student": student, "course": course, "template": template, "state": "running"}
    warned = Session.objects.create(
        reason_code="session.budget_warning", reason_params={"percent": 80, "course": "AI101"}, **common
    )
    used_up = Session.objects.create(
        reason_code="session.budget_used_up", reason_params={"course": "AI101"}, budget_stop_at=STOP_AT, **common
    )

    migrate(AFTER)

    # Only the columns the reason is drawn from: later migrations add others this schema lacks.
    stored = LabSession.objects.only("reason_code", "reason_params", "budget_stop_at")
    assert stored.get(pk=warned.pk).reason.endswith("at 100 % your labs stop 5 min later")
    stops = f"{timezone.localtime(STOP_AT):%H:%M}"
    assert f"stops at {stops}, 5 min after the budget was used up" in stored.get(pk=used_up.pk).reason

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
