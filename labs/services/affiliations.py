"""Which institutions an account belongs to (``labs.models.Affiliation``): the paths that make an
account part of an institution, and the platform operator's link of an existing account."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from labs.models import Affiliation, Institution
from labs.services.audit import audit_record


def affiliation_ensure(*, user_ids: Iterable[int], institution: Institution | int, source: str) -> None:
    """Affiliate the accounts ``user_ids`` with ``institution``; those affiliated already keep their
    affiliation (and its source). Called inside the caller's transaction: the affiliation is
    written with the enrolment, role or identity that causes it."""
    institution_id = institution if isinstance(institution, int) else institution.pk
    Affiliation.objects.bulk_create(
        (Affiliation(user_id=user_id, institution_id=institution_id, source=source) for user_id in set(user_ids)),
        batch_size=1000,
        ignore_conflicts=True,
    )


def affiliation_link(*, user, institution: Institution, by) -> bool:
    """A platform operator's invitation: ``user`` (an existing account) joins ``institution``, whose
    rosters can find it from now on. ``False`` if it was affiliated already."""
    with transaction.atomic():
        _affiliation, created = Affiliation.objects.get_or_create(
            user=user, institution=institution, defaults={"source": Affiliation.Source.INVITATION}
        )
        if created:
            target = f"{user.get_username()} in {institution.slug}"
            audit_record(by=by, action="institution.affiliate", target=target, institution=institution)
    return created
