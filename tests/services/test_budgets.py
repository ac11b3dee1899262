"""Weekly NPU budgets: a meter on the student page, refused at launch when used up, a warning at
80 %, a stop with grace at 100 %, and more granted by an instructor for one student."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from labs.domain.states import SessionState
from labs.models import Allocation, AuditEvent, BudgetGrant, LabSession
from labs.selectors.usage import student_budgets, week_start
from labs.services.allocation import allocation_pass
from labs.services.budgets import budget_grant, budgets_enforce
from labs.services.sessions import LaunchRefused, session_launch, session_transition

pytestmark = pytest.mark.django_db


@pytest.fixture
def budgeted(world, settings):
    """10 AI-Core-% x hours a week per student; ``medium`` is a 10 % share: one hour of it."""
    if timezone.now() - week_start(timezone.now()) < timedelta(hours=2):
        pytest.skip("the week began less than two hours ago: no room for the hour-long spans these tests place in it")
    settings.LAB_BUDGET_GRACE_SECONDS = 300
    quota = world["course"].quota
    quota.budget_core_percent_hours, quota.sessions_per_student = 10, 2
    quota.save()
    return world


def running_for(world, minutes: float, index: int = 0) -> LabSession:
    """A running ``medium`` session of student ``index`` admitted ``minutes`` ago (this week)."""
    session = session_launch(student=world["students"][index], course=world["course"], template=world["medium"])
    allocation_pass()
    assert session_transition(session.pk, to=SessionState.STARTING)
    assert session_transition(session.pk, to=SessionState.RUNNING, access_url="http://lab/")
    Allocation.objects.filter(session=session).update(created_at=timezone.now() - timedelta(minutes=minutes))
    return session


def budget_of(world, index: int = 0):
    return student_budgets(pairs=[(world["course"].pk, world["students"][index].pk)])[
        (world["course"].pk, world["students"][index].pk)
    ]


def test_usage_counts_against_the_week_s_budget(budgeted):
    running_for(budgeted, 30)
    budget = budget_of(budgeted)
    assert (budget.core_percent_hours, budget.gib_hours) == (10, None)
    assert budget.percent == 50


def test_a_warning_at_80_percent_a_stop_with_grace_at_100_and_then_the_stop(budgeted):
    session = running_for(budgeted, 50)
    assert budgets_enforce().warned == [str(session.pk)]
    warned = LabSession.objects.get(pk=session.pk)
    assert warned.reason_code == "session.budget_warning" and "80 %" in warned.reason
    assert budgets_enforce().warned == []  # once

    Allocation.objects.filter(session=session).update(created_at=timezone.now() - timedelta(minutes=61))
    assert budgets_enforce().stopping == [str(session.pk)]
    used_up = LabSession.objects.get(pk=session.pk)
    assert used_up.state == "running" and used_up.reason_code == "session.budget_used_up"
    assert timedelta(seconds=290) < used_up.budget_stop_at - timezone.now() <= timedelta(seconds=300)

    LabSession.objects.filter(pk=session.pk).update(budget_stop_at=timezone.now() - timedelta(seconds=1))
    assert budgets_enforce().stopped == [str(session.pk)]
    stopped = LabSession.objects.get(pk=session.pk)
    assert stopped.state == "stopping" and stopped.reason_code == "session.budget_stopped"


def test_a_used_up_budget_refuses_a_launch_with_the_reason_and_creates_nothing(budgeted):
    session = running_for(budgeted, 70)
    before = LabSession.objects.count()
    with pytest.raises(LaunchRefused, match="weekly NPU budget in .* is used up"):
        session_launch(student=budgeted["students"][0], course=budgeted["course"], template=budgeted["small"])
    assert LabSession.objects.count() == before
    # Another student's budget is their own.
    session_launch(student=budgeted["students"][1], course=budgeted["course"], template=budgeted["small"])
    assert session.pk


def test_a_launch_counts_every_grant_of_this_week_to_this_student_in_this_course_and_no_other(budgeted):
    # 70 minutes of a 10 % share: 11.7 AI-Core-% x hours of the week's 10.
    running_for(budgeted, 70)
    course, student, other = budgeted["course"], budgeted["students"][0], budgeted["students"][1]
    monday = week_start(timezone.now()).date()

    def launch():
        return session_launch(student=student, course=course, template=budgeted["small"])

    def grant(core: int, *, week=monday, to=student) -> None:
        BudgetGrant.objects.create(course=course, student=to, week_start=week, core_percent_hours=core)

    grant(10, week=monday - timedelta(days=7))  # last week's
    grant(10, to=other)  # another student's
    grant(1)  # 11.7 of 11: still used up
    with pytest.raises(LaunchRefused, match="weekly NPU budget in .* is used up"):
        launch()
    grant(1)  # 11.7 of 12
    assert launch().state == SessionState.QUEUED


def test_an_instructor_s_grant_lifts_the_stop_and_is_audited(budgeted):
    session = running_for(budgeted, 61)
    budgets_enforce()
    assert LabSession.objects.get(pk=session.pk).budget_stop_at is not None

    instructor = Client()
    instructor.force_login(budgeted["instructor"])
    url = f"/courses/{budgeted['course'].pk}/usage/"
    student = budgeted["students"][0].username
    page = instructor.get(url).content.decode()
    assert "Grant more budget this week" in page and 'data-budget="10' in page
    assert instructor.post(url, {"username": "nobody", "core_percent_hours": 5}, follow=True).status_code == 200
    assert instructor.post(url, {"username": student}, follow=True).content.decode().count("Grant some") == 1
    assert not BudgetGrant.objects.exists()
    instructor.post(url, {"username": student, "core_percent_hours": 10})

    grant = BudgetGrant.objects.get()
    assert (grant.core_percent_hours, grant.week_start) == (10, week_start(timezone.now()).date())
    assert AuditEvent.objects.filter(action="budget.grant").count() == 1
    assert budgets_enforce().cleared == [str(session.pk)]
    kept = LabSession.objects.get(pk=session.pk)
    assert kept.budget_stop_at is None and kept.reason_code == ""
    assert budget_of(budgeted).core_percent_hours == 20


def test_only_instructors_grant(budgeted):
    from labs.models import Enrollment
    from tests.factories import UserFactory

    assistant = UserFactory(username="ta")
    Enrollment.objects.create(user=assistant, course=budgeted["course"], role=Enrollment.Role.ASSISTANT)
    client = Client()
    client.force_login(assistant)
    url = f"/courses/{budgeted['course'].pk}/usage/"
    assert client.post(url, {"username": budgeted["students"][0].username, "core_percent_hours": 5}).status_code == 403
    student = Client()
    student.force_login(budgeted["students"][0])
    assert student.post(url, {"username": budgeted["students"][0].username, "core_percent_hours": 5}).status_code == 404
    assert not BudgetGrant.objects.exists()
    budget_grant(
        course=budgeted["course"], student=budgeted["students"][0], core_percent_hours=1, gib_hours=0, by=budgeted["instructor"]
    )
    assert BudgetGrant.objects.count() == 1


def test_the_student_page_shows_the_meter(budgeted):
    running_for(budgeted, 30)
    client = Client()
    client.force_login(budgeted["students"][0])
    page = client.get("/").content.decode()
    assert '<meter id="budget-' in page and 'value="50"' in page
    assert "5.0 of 10 AI-Core-% × hours used (50 %)" in page


def test_budget_stops_are_counted_by_policy(budgeted):
    from tests.metrics.helpers import scrape, values

    session = running_for(budgeted, 61)
    budgets_enforce()
    LabSession.objects.filter(pk=session.pk).update(budget_stop_at=timezone.now() - timedelta(seconds=1))
    budgets_enforce()
    stops = values(scrape(), "npu_lab_policy_stops_total", "policy")
    assert stops == {("lifetime",): 0, ("idle_culled",): 0, ("budget_stopped",): 1, ("reclaimed",): 0}


def test_the_warnings_say_the_grace_and_when_the_lab_stops(budgeted):
    session = running_for(budgeted, 50)
    budgets_enforce()
    warned = LabSession.objects.get(pk=session.pk)
    assert warned.reason.endswith("at 100 % your labs stop 5 min later")

    Allocation.objects.filter(session=session).update(created_at=timezone.now() - timedelta(minutes=61))
    now = timezone.now()
    budgets_enforce(now=now)
    used_up = LabSession.objects.get(pk=session.pk)
    stops = timezone.localtime(now + timedelta(seconds=300))
    assert used_up.budget_stop_at == now + timedelta(seconds=300)
    assert f"this lab stops at {stops:%H:%M}, 5 min after the budget was used up; save your work" in used_up.reason


def test_a_grace_of_seconds_is_said_in_seconds(budgeted, settings):
    settings.LAB_BUDGET_GRACE_SECONDS = 90
    session = running_for(budgeted, 61)
    now = timezone.now()
    budgets_enforce(now=now)
    stops = timezone.localtime(now + timedelta(seconds=90))
    assert f"stops at {stops:%H:%M}, 90 s after the budget was used up" in LabSession.objects.get(pk=session.pk).reason
