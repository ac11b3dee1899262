from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _


class Reservation(models.Model):
    """A course's booking of ``count`` sessions of ``template`` for its meeting times.

    Weekly on ``weekdays`` (0 = Monday) from ``first_date`` to ``last_date``, or on the single
    ``dates``; at ``start_time`` (wall clock in ``settings.TIME_ZONE``) for ``minutes``. The rule
    is kept for people; what the checks and the controller read are its ``slots``, expanded once
    at booking (``labs.services.reservations.reservation_book``).

    ``holder`` is the account that owns the pre-started sessions until a student claims one: an
    inactive user made for the booking (it cannot sign in), so every session keeps an owner and
    the usage of an unclaimed one is the course's, under that account, not a student's.
    """

    course = models.ForeignKey("labs.Course", on_delete=models.CASCADE, related_name="reservations")
    template = models.ForeignKey("labs.LabTemplate", on_delete=models.PROTECT, related_name="+", verbose_name=_("template"))
    count = models.PositiveIntegerField(_("sessions"))
    start_time = models.TimeField(_("starts at"))
    minutes = models.PositiveIntegerField(_("length (minutes)"))
    weekdays = models.JSONField(default=list, blank=True)
    first_date = models.DateField(null=True, blank=True)
    last_date = models.DateField(null=True, blank=True)
    dates = models.JSONField(default=list, blank=True)
    holder = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(count__gte=1), name="reservation_count_positive"),
            models.CheckConstraint(condition=Q(minutes__gte=1, minutes__lte=24 * 60), name="reservation_minutes_range"),
        ]

    def __str__(self) -> str:
        return f"{self.course.code}: {self.count} x {self.template.slug} at {self.start_time:%H:%M}"


class ReservationSlot(models.Model):
    """One meeting of a reservation: from ``starts_at`` to ``ends_at`` (aware).

    ``prestarted_at`` is set, in the same transaction that queues the slot's pre-started
    sessions, by the pre-start rule: a slot is pre-started once (``reservations_enforce``).
    """

    reservation = models.ForeignKey(Reservation, on_delete=models.CASCADE, related_name="slots")
    starts_at = models.DateTimeField(db_index=True)
    ends_at = models.DateTimeField()
    prestarted_at = models.DateTimeField(null=True, blank=True)
    # How many of its sessions did not fit elsewhere when ``evacuated_node`` was emptied for
    # maintenance (labs.services.evacuation): what the instructor is told.
    evacuation_shortfall = models.PositiveIntegerField(default=0)
    evacuated_node = models.CharField(max_length=253, blank=True)

    class Meta:
        ordering = ["starts_at", "id"]
        indexes = [models.Index(fields=["ends_at", "starts_at"], name="slot_ends_starts")]
        constraints = [
            models.UniqueConstraint(fields=["reservation", "starts_at"], name="slot_unique_start"),
            models.CheckConstraint(condition=Q(ends_at__gt=F("starts_at")), name="slot_ends_after_start"),
        ]

    def __str__(self) -> str:
        return f"{self.reservation_id}: {self.starts_at:%Y-%m-%d %H:%M}–{self.ends_at:%H:%M}"
