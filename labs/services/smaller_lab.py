"""A student takes the smaller lab offered while theirs waits for capacity (``labs.domain.offers``)."""

from __future__ import annotations

import secrets
from typing import NamedTuple

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from labs.dispatch import controller_wake
from labs.domain.offers import is_smaller
from labs.domain.reasons import Reason
from labs.domain.states import SessionState
from labs.models import LabSession, LabTemplate
from labs.selectors.rows import one
from labs.services.allocation import best_effort_nodes, launch_request, session_place_now, template_request
from labs.services.events import session_changes_publish, session_event
from labs.services.locks import allocation_lock
from labs.services.sessions import reason_fields, session_transition


class SwitchRefused(ValidationError):
    """The switch did not happen; nothing changed but, when the smaller lab no longer fits, the offer
    is taken off the session. The message says why, in the reader's language."""


class Switched(NamedTuple):
    started: LabSession  # the smaller lab, admitted: the controller starts it
    withdrawn: LabSession  # the queued one, stopped


def session_switch_smaller(*, session_id, student, template_id: int) -> Switched:
    """Withdraw ``student``'s session queued for capacity and start ``template_id`` in its place.

    One transaction under the allocation lock, so no pass hands the room out meanwhile. The session
    must be the student's, still queued and not pre-started for a class; its template must allow
    offers (``offers_smaller_lab``); ``template_id`` must be offered in its course and smaller
    (``labs.domain.offers.is_smaller``). The smaller session is then decided by the engine on the
    cluster as it is now, with the course's quota and the student's limit: placed, it is admitted
    with its Allocation (the controller creates its instance) and the queued session stopped with
    the reason ``session.switched_smaller``. Not placed (another launch took the room since the
    pass made the offer), ``SwitchRefused`` says so and the session stays queued, its offer taken
    off. Other refusals change nothing.
    """
    no_longer_fits = False
    with transaction.atomic():
        allocation_lock()
        queued = one(
            LabSession.objects.select_for_update(of=("self",))
            .select_related("template", "course")
            .filter(pk=session_id, student=student)
        )
        if queued is None or queued.state != SessionState.QUEUED:
            raise SwitchRefused(_("This lab is no longer waiting; there is nothing to switch."))
        if queued.reservation_slot_id is not None or not queued.template.offers_smaller_lab:
            raise SwitchRefused(_("This lab offers no smaller one."))
        template = one(LabTemplate.objects.filter(pk=template_id, courses=queued.course_id))
        selector = best_effort_nodes()
        if template is None or not is_smaller(
            template_request(
                template, key="smaller", course_id=queued.course_id, student_id=student.pk, best_effort_selector=selector
            ),
            launch_request(queued, selector),
        ):
            raise SwitchRefused(_("That template is not a smaller lab of this course."))
        try:
            with transaction.atomic():
                started = _launch_placed(queued, template)
        except _NoRoom:
            no_longer_fits = True
            LabSession.objects.filter(pk=queued.pk).update(smaller_offer={}, version=F("version") + 1)
            session_changes_publish([queued.pk], queues_moved=False)
        else:
            session_transition(
                queued.pk,
                to=SessionState.STOPPED,
                reason=Reason.of("session.switched_smaller", template=template.name),
                only_from={SessionState.QUEUED},
                smaller_offer={},
            )
            session_changes_publish([started.pk])
            controller_wake()
    if no_longer_fits:
        raise SwitchRefused(
            _("The smaller lab no longer fits: the free room was taken since it was offered. Your lab stays queued.")
        )
    queued.refresh_from_db()
    return Switched(started=started, withdrawn=queued)


class _NoRoom(Exception):
    """The engine would not place the smaller lab now."""


def _launch_placed(queued: LabSession, template: LabTemplate) -> LabSession:
    """The smaller session, admitted where the engine placed it (``session_place_now``);
    ``_NoRoom`` (raised inside the caller's savepoint, which then undoes the session's creation)
    when the engine placed it nowhere."""
    session = LabSession.objects.create(
        student_id=queued.student_id,
        course_id=queued.course_id,
        template=template,
        state=SessionState.QUEUED,
        queue_at=queued.queue_at or timezone.now(),
        secret=secrets.token_urlsafe(32),
        **reason_fields(Reason.of("session.queued")),
    )
    if not session_place_now(session):
        raise _NoRoom
    session_event("session.queued", session.pk)
    session.refresh_from_db()
    return session
