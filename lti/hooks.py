"""What the labs app calls: when a session ends (``settings.LAB_SESSION_ENDED_HOOKS``), to learn
whether a course's members sign in through an LMS (``settings.ROSTER_COURSE_LMS``) and which
accounts they sign in with (``settings.ROSTER_LMS_ACCOUNTS``)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models.functions import Lower

from lti import grading
from lti.selectors import context_of_course


def session_ended(session_id) -> None:
    """A session launched from an LMS link that posts scores has ended (this runs inside the
    transaction that ended it): its score (``grading.session_completed``) becomes due in that
    transaction, and is sent to a worker once it commits. Should that send be lost, beat's
    sweep finds the score due."""
    grading.session_completed(session_id)


def course_lms(course) -> str:
    """The name of the LMS registration ``course`` is linked to (an LTI context), or ``""``: its
    members sign in through that LMS, so the roster import sends them no invitation."""
    context = context_of_course(course=course)
    return context.registration.name if context is not None else ""


def lms_accounts(course, emails: set[str]) -> dict[str, list]:
    """The accounts that sign in through the LMS ``course`` is linked to, by lower-cased e-mail,
    for the lower-cased ``emails``: those of an identity made through the course's registration,
    affiliated with the course's institution (never another institution's). Empty when the course
    is not linked to an LMS."""
    context = context_of_course(course=course)
    if context is None or not emails or context.registration.institution_id != course.institution_id:
        return {}
    users = (
        get_user_model()
        .objects.annotate(email_lower=Lower("email"))
        .filter(
            email_lower__in=emails,
            lti_identities__registration=context.registration,
            affiliations__institution_id=course.institution_id,
        )
        .distinct()
        .order_by("pk")
    )
    found: dict[str, list] = {}
    for user in users:
        found.setdefault(user.email_lower, []).append(user)
    return found
