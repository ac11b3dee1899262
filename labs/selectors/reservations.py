"""Reads for class reservations, scoped to one course (found through ``course_for_console``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Min, Q
from django.utils import timezone

from labs.models import Course, Reservation, ReservationSlot

UPCOMING_SLOTS = 30


@dataclass
class CourseReservations:
    reservations: list[Reservation]  # not cancelled, with a slot still to end
    slots: list[ReservationSlot]  # the next ones (or under way), with ``prestarted`` and ``claimed`` counts


def course_reservations(*, course: Course) -> CourseReservations:
    """The course's bookings still to come and its next ``UPCOMING_SLOTS`` slots (two queries)."""
    now = timezone.now()
    slots = list(
        ReservationSlot.objects.filter(reservation__course=course, reservation__cancelled_at__isnull=True, ends_at__gt=now)
        .select_related("reservation__template")
        .annotate(prestarted=Count("sessions"), claimed=Count("sessions", filter=Q(sessions__claimed_at__isnull=False)))
        .order_by("starts_at", "id")[:UPCOMING_SLOTS]
    )
    reservations = list(
        Reservation.objects.filter(course=course, cancelled_at__isnull=True, slots__ends_at__gt=now)
        .select_related("template")
        .annotate(slots_left=Count("slots"), next_start=Min("slots__starts_at"))
        .order_by("next_start")
    )
    return CourseReservations(reservations, slots)


def reservation_of(*, course: Course, reservation_id: int) -> Reservation | None:
    """The course's reservation ``reservation_id``, or ``None`` (another course's is not found)."""
    return Reservation.objects.filter(course=course, pk=reservation_id).select_related("template").first()


def upcoming_slots(*, institutions: Iterable[int] | None, limit: int = UPCOMING_SLOTS) -> list[ReservationSlot]:
    """The next class slots (or under way) of the given institutions' courses (``None``: all, for a
    platform operator), with ``prestarted`` and ``claimed`` counts: what operators see coming."""
    slots = ReservationSlot.objects.filter(reservation__cancelled_at__isnull=True, ends_at__gt=timezone.now())
    if institutions is not None:
        slots = slots.filter(reservation__course__institution_id__in=list(institutions))
    return list(
        slots.select_related("reservation__template", "reservation__course__institution")
        .annotate(prestarted=Count("sessions"), claimed=Count("sessions", filter=Q(sessions__claimed_at__isnull=False)))
        .order_by("starts_at", "id")[:limit]
    )
