"""A member's name and e-mail as their LMS has them: what a roster sync (the API's PUT, LTI's
names and roles service) changes in an account, and when it refuses to change the e-mail.

The LMS is where people's names and addresses are kept, so a sync follows it; but an e-mail is
also how an account is found and reached, so a sync does not give it to an account when another
account of the institution has it, and does not change it for an account that signs in with a
password (or is staff, or belongs to another institution too): its owner changes that one."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.translation import gettext as _

from labs.models import Affiliation, Institution
from labs.services.audit import audit_record

FIELDS = ("email", "first_name", "last_name")


@dataclass
class DetailsChange:
    """What a sync would change in one account (``changes``: field -> new value) and, when the
    e-mail it was given cannot be taken, why (``refused``; the names still change)."""

    changes: dict[str, str] = field(default_factory=dict)
    refused: str = ""
    description: str = ""  # the changes in words, once made (``details_describe``)


def email_taken(*, institution: Institution, email: str, user_id: int | None) -> bool:
    """Whether another account of ``institution`` has ``email`` (in any case)."""
    User = get_user_model()
    others = User.objects.filter(affiliations__institution=institution, email__iexact=email)
    return others.exclude(pk=user_id).exists() if user_id is not None else others.exists()


def _owner_keeps_email(user, institution: Institution) -> bool:
    if user.is_staff or user.is_superuser or user.has_usable_password():
        return True
    return Affiliation.objects.filter(user=user).exclude(institution=institution).exists()


def details_change(
    *, user, institution: Institution, email: str = "", first_name: str = "", last_name: str = ""
) -> DetailsChange:
    """What the LMS's ``email``, ``first_name`` and ``last_name`` change in ``user`` (blank: left as is)."""
    result = DetailsChange()
    for name, value in (("first_name", first_name[:150]), ("last_name", last_name[:150])):
        if value and getattr(user, name) != value:
            result.changes[name] = value
    email = email[:254]
    if email and user.email != email:
        if user.email.lower() != email.lower() and _owner_keeps_email(user, institution):
            result.refused = _("the account's e-mail is changed only by its owner, not by a roster sync")
        elif user.email.lower() != email.lower() and email_taken(institution=institution, email=email, user_id=user.pk):
            result.refused = _("%(email)s is the e-mail of another account") % {"email": email}
        else:
            result.changes["email"] = email
    return result


def details_describe(user, changes: dict[str, str]) -> str:
    """``changes`` in words, old → new (before they are saved)."""
    labels = {"email": _("e-mail"), "first_name": _("first name"), "last_name": _("last name")}
    return "; ".join(
        _("%(field)s %(old)s → %(new)s") % {"field": labels[name], "old": getattr(user, name) or "–", "new": changes[name]}
        for name in FIELDS
        if name in changes
    )


def details_apply(*, user, changes: dict[str, str], institution: Institution, by=None) -> None:
    """Save ``changes`` in ``user`` and audit them, in one transaction."""
    if not changes:
        return
    with transaction.atomic():
        before = {name: getattr(user, name) for name in changes}
        for name, value in changes.items():
            setattr(user, name, value)
        user.save(update_fields=list(changes))
        audit_record(
            by=by,
            action="account.details",
            target=f"account {user.get_username()}",
            institution=institution,
            before=before,
            after=dict(changes),
        )
