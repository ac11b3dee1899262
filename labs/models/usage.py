from django.conf import settings
from django.db import models
from django.db.models import Q


class UsageRecord(models.Model):
    """What one allocation held for one person, written in the transaction that releases it
    (exactly once: the release is a conditional UPDATE, and an allocation has one record per
    ``student``).

    What the session held, from admission to release: AI-Core-% x seconds and MiB x seconds, with
    who and what it was for as they were then. A lab pre-started for a class has two: until the
    claim it was held for the course, by its reservation's holder (``started_at`` the admission,
    ``ended_at`` the claim), and from the claim for the student who was handed it. Open
    allocations are not here yet; readers add them up to now (``labs.selectors.usage``).
    """

    allocation = models.ForeignKey("labs.Allocation", on_delete=models.PROTECT, related_name="usage_records")
    session = models.ForeignKey("labs.LabSession", on_delete=models.PROTECT, related_name="+")
    student = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    course = models.ForeignKey("labs.Course", on_delete=models.PROTECT, related_name="usage_records")
    institution = models.ForeignKey("labs.Institution", on_delete=models.PROTECT, related_name="+")
    template = models.ForeignKey("labs.LabTemplate", on_delete=models.PROTECT, related_name="+")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(db_index=True)
    core_percent = models.PositiveSmallIntegerField()
    memory_mib = models.PositiveIntegerField()
    core_percent_seconds = models.BigIntegerField()
    memory_mib_seconds = models.BigIntegerField()
    borrowed = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(fields=["course", "ended_at"], name="usage_course_ended"),
            models.Index(fields=["student", "ended_at"], name="usage_student_ended"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["allocation", "student"], name="usage_one_per_allocation_and_student"),
            models.CheckConstraint(condition=Q(ended_at__gte=models.F("started_at")), name="usage_ends_after_start"),
            models.CheckConstraint(
                condition=Q(core_percent_seconds__gte=0, memory_mib_seconds__gte=0), name="usage_totals_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}: {self.core_percent_seconds} %·s, {self.memory_mib_seconds} MiB·s"


class BudgetGrant(models.Model):
    """More NPU budget for one student in one course for one week, granted by an instructor."""

    course = models.ForeignKey("labs.Course", on_delete=models.CASCADE, related_name="budget_grants")
    student = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    week_start = models.DateField()  # the Monday of the week it is for
    core_percent_hours = models.PositiveIntegerField(default=0)
    gib_hours = models.PositiveIntegerField(default=0)
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["course", "week_start"], name="grant_course_week")]

    def __str__(self) -> str:
        return f"{self.student_id} in {self.course_id}, week of {self.week_start}: +{self.core_percent_hours} %·h"
