"""Weekly NPU budgets per student and course (``CourseQuota.budget_*``, plus instructors' grants).

Refused at launch once used up (``labs.services.sessions.session_launch``); while sessions run,
``budgets_enforce`` (beat, every ``LAB_BUDGET_CHECK_SECONDS``) warns at
``LAB_BUDGET_WARNING_PERCENT`` and, at 100 %, gives the student ``LAB_BUDGET_GRACE_SECONDS`` to
save their work before the sessions stop; both warnings say the grace, the second the time. What
is used is read from the usage ledger, never counted here, so a worker that dies mid-check loses
nothing and counts nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from labs.domain.reasons import Reason, duration
from labs.domain.states import RECLAIMABLE
from labs.models import BudgetGrant, Course, LabSession
from labs.selectors.usage import student_budgets, week_start
from labs.services.audit import audit_record
from labs.services.events import events_batch, session_changes_publish
from labs.services.sessions import reason_fields, session_stop


@dataclass
class BudgetReport:
    warned: list[str] = field(default_factory=list)
    stopping: list[str] = field(default_factory=list)  # used up: stop scheduled
    stopped: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)  # more was granted


def budgets_enforce(*, now=None) -> BudgetReport:
    report = BudgetReport()
    now = now or timezone.now()
    budgeted = Q(course__quota__budget_core_percent_hours__isnull=False) | Q(course__quota__budget_gib_hours__isnull=False)
    sessions = list(
        LabSession.objects.filter(budgeted, state__in=RECLAIMABLE)
        # A lab pre-started for a class belongs to no student until claimed: no budget applies.
        .exclude(Q(reservation_slot__isnull=False) & Q(claimed_at__isnull=True))
        .select_related("course")
        .only("pk", "course__code", "student_id", "reason_code", "budget_stop_at", "reclaim_at")
    )
    budgets = student_budgets(pairs={(s.course_id, s.student_id) for s in sessions}, now=now)
    warn_at = settings.LAB_BUDGET_WARNING_PERCENT / 100
    grace = duration(settings.LAB_BUDGET_GRACE_SECONDS)
    with events_batch(), transaction.atomic():
        changed: list[str] = []

        def note(session: LabSession, reason: Reason | None, **fields) -> None:
            # A reclaim warning says more than a budget one: it keeps the card's words.
            words = {} if session.reclaim_at is not None else reason_fields(reason)
            LabSession.objects.filter(pk=session.pk).update(version=F("version") + 1, **words, **fields)
            changed.append(str(session.pk))

        for s in sessions:
            budget = budgets.get((s.course_id, s.student_id))
            if budget is None:
                continue
            course = s.course.code
            if budget.fraction >= 1:
                if s.budget_stop_at is None:
                    stop_at = now + timedelta(seconds=settings.LAB_BUDGET_GRACE_SECONDS)
                    used_up = Reason.of(
                        "session.budget_used_up", course=course, time=timezone.localtime(stop_at).strftime("%H:%M"), grace=grace
                    )
                    note(s, used_up, budget_stop_at=stop_at)
                    report.stopping.append(str(s.pk))
                elif s.budget_stop_at <= now and session_stop(
                    session_id=s.pk, reason=Reason.of("session.budget_stopped", course=course)
                ):
                    report.stopped.append(str(s.pk))
            elif s.budget_stop_at is not None:
                note(s, None, budget_stop_at=None)
                report.cleared.append(str(s.pk))
            elif budget.fraction >= warn_at and s.reason_code != "session.budget_warning":
                warning = Reason.of(
                    "session.budget_warning", percent=settings.LAB_BUDGET_WARNING_PERCENT, course=course, grace=grace
                )
                note(s, warning)
                report.warned.append(str(s.pk))
            elif budget.fraction < warn_at and s.reason_code == "session.budget_warning":
                note(s, None)
                report.cleared.append(str(s.pk))
        session_changes_publish(changed)
    return report


def budget_grant(*, course: Course, student, core_percent_hours: int, gib_hours: int, by) -> BudgetGrant:
    """More budget for ``student`` in ``course`` this week; their sessions stop no sooner for it (next check)."""
    with transaction.atomic():
        grant = BudgetGrant.objects.create(
            course=course,
            student=student,
            week_start=week_start(timezone.now()).date(),
            core_percent_hours=core_percent_hours,
            gib_hours=gib_hours,
            granted_by=by,
        )
        audit_record(
            by=by,
            action="budget.grant",
            target=f"{student.get_username()} in {course.code}",
            institution=course.institution,
            after={"core_percent_hours": core_percent_hours, "gib_hours": gib_hours, "week_of": grant.week_start.isoformat()},
        )
    return grant
