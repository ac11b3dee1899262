"""The invitation links of the accounts a roster import made (they have no password yet).

A link is Django's password reset token (``default_token_generator``) for the account, on the
accounts app's invitation page: a secret the instructor passes on, made afresh at each read,
never stored or logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from labs.exports import csv_document
from labs.models import Course


@dataclass(frozen=True)
class Invitation:
    username: str
    email: str
    name: str
    path: str  # /accounts/invitation/<uidb64>/<token>/: a secret


def roster_invitations(*, course: Course, user_ids: list[int]) -> list[Invitation]:
    """Links for those of ``user_ids`` that are members of ``course``, accounts of its institution,
    have never logged in and have no password: an account that has got in needs none, and no
    link is made for anyone else's account."""
    users = (
        get_user_model()
        .objects.filter(
            pk__in=user_ids,
            enrollments__course=course,
            affiliations__institution=course.institution,
            last_login__isnull=True,
        )
        .order_by("username")
    )
    return [
        Invitation(
            username=user.get_username(),
            email=user.email,
            name=user.get_full_name(),
            path=reverse(
                "invitation",
                kwargs={"uidb64": urlsafe_base64_encode(force_bytes(user.pk)), "token": default_token_generator.make_token(user)},
            ),
        )
        for user in users
        if not user.has_usable_password()
    ]


def invitations_csv(invitations: list[Invitation], absolute) -> str:
    """``username,email,name,invitation_link``; ``absolute`` makes a path a full URL (the request's)."""
    return csv_document(
        ["username", "email", "name", "invitation_link"],
        ([i.username, i.email, i.name, absolute(i.path)] for i in invitations),
    )
