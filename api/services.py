"""Write paths of the API: tokens, courses made by an LMS, roster sync, launches with an
idempotency key, stops. Each is one transaction and writes its audit event in it; the token is
the actor (``ApiClient``), so the audit log says which LMS did what."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from api.models import ApiToken, IdempotencyKey
from api.scopes import unknown_scopes
from api.tokens import token_digest, token_new, token_prefix
from labs.models import Course, Enrollment, Institution, LabSession, LabTemplate
from labs.services import catalog
from labs.services.audit import audit_record
from labs.services.member_details import DetailsChange, details_apply, details_change, details_describe
from labs.services.operations import session_stop_by_operator
from labs.services.roster import Action, RosterError, roster_apply
from labs.services.sessions import session_launch

# --- a course's templates ------------------------------------------------------------------------


class OfferRefused(Exception):
    """The template cannot be offered in (or withdrawn from) the course: the message says why."""


def course_template_offer(*, course: Course, template: LabTemplate, by) -> bool:
    """Offer ``template`` in ``course`` as the console's "Offer it" does; True if it was not offered before."""
    if course.archived:
        raise OfferRefused(_("This course is archived; unarchive it to change it."))
    if course.templates.filter(pk=template.pk).exists():
        return False
    if template.course_id is not None:
        raise OfferRefused(_("Only the institution's catalogue templates can be offered; this one is a course's own."))
    if catalog.template_attach(course=course, template_id=template.pk, by=by) is None:
        raise OfferRefused(_("This template cannot be offered in this course."))
    return True


def course_template_withdraw(*, course: Course, template: LabTemplate, by) -> None:
    """Stop offering ``template`` in ``course`` (as the console's "Stop offering"); running sessions go on."""
    if course.archived:
        raise OfferRefused(_("This course is archived; unarchive it to change it."))
    catalog.template_detach(course=course, template_id=template.pk, by=by)


# --- tokens --------------------------------------------------------------------------------------


def token_create(
    *, institution: Institution, name: str, scopes: list[str], expires_at: datetime | None = None, by=None
) -> tuple[ApiToken, str]:
    """A new token of ``institution``; returns it and its secret, which is not stored and cannot be shown again."""
    if unknown := unknown_scopes(scopes):
        raise ValueError(f"unknown scopes {unknown}")
    if not name.strip():
        raise ValueError("a token needs a name")
    secret = token_new()
    with transaction.atomic():
        token = ApiToken.objects.create(
            institution=institution,
            name=name.strip(),
            prefix=token_prefix(secret),
            secret_sha256=token_digest(secret),
            scopes=sorted(set(scopes)),
            expires_at=expires_at,
            created_by=by if getattr(by, "pk", None) else None,
        )
        audit_record(
            by=by,
            action="api_token.create",
            target=f"token {token.name} ({token.prefix}…)",
            institution=institution,
            after={"scopes": token.scopes, "expires_at": expires_at},
        )
    return token, secret


def token_revoke(*, token: ApiToken, by=None, reason: str = "") -> bool:
    """Revoke ``token`` at once; revoking twice changes nothing (returns ``False``)."""
    with transaction.atomic():
        if not ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
            return False
        audit_record(
            by=by,
            action="api_token.revoke",
            target=f"token {token.name} ({token.prefix}…)",
            institution=token.institution,
            after={"reason": reason},
        )
    token.refresh_from_db(fields=["revoked_at"])
    return True


# --- courses -------------------------------------------------------------------------------------


def course_create(*, institution: Institution, by, **fields) -> Course:
    """A course made by an LMS: no instructor yet (the roster sync adds them)."""
    with transaction.atomic():
        course = Course.objects.create(institution=institution, **fields)
        audit_record(by=by, action="course.create", target=f"course {course.code}", institution=institution, after=fields)
    return course


# --- roster --------------------------------------------------------------------------------------

ROSTER_COLUMNS = ("username", "email", "role", "first_name", "last_name")


@dataclass
class RosterRow:
    username: str
    email: str
    role: str
    result: str  # added, updated (role, name or e-mail changed), unchanged, removed, rejected
    reason: str = ""
    index: int | None = None  # the row's place in the request body; None for a removed member


@dataclass
class RosterSync:
    rows: list[RosterRow] = field(default_factory=list)

    def count(self, result: str) -> int:
        return sum(1 for r in self.rows if r.result == result)


_RESULT_OF = {
    Action.ADD: "added",
    Action.CREATE: "added",
    Action.ROLE: "updated",
    Action.UNCHANGED: "unchanged",
    Action.ERROR: "rejected",
}


def _as_csv(members: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(ROSTER_COLUMNS)
    for m in members:
        writer.writerow([m.get(c, "") or "" for c in ROSTER_COLUMNS])
    return out.getvalue()


def _details_of(institution: Institution, members: list[dict]) -> dict[int, tuple]:
    """Per row of ``members`` naming an account of ``institution`` by username: the account and
    what the row changes in its name and e-mail (``labs.services.member_details``)."""
    names = {m["username"] for m in members if m.get("username")}
    suffix = f"@{institution.slug}"
    accounts = {
        u.get_username(): u
        for u in get_user_model()
        .objects.filter(affiliations__institution=institution)
        .filter(Q(username__in=names) | Q(username__in=[n + suffix for n in names]))
    }
    found: dict[int, tuple] = {}
    taken: set[str] = set()  # e-mails given to an account by an earlier row of this body
    for index, member in enumerate(members):
        user = accounts.get(member.get("username") or "") or accounts.get((member.get("username") or "") + suffix)
        if user is None:
            continue
        change = details_change(
            user=user,
            institution=institution,
            email=member.get("email") or "",
            first_name=member.get("first_name") or "",
            last_name=member.get("last_name") or "",
        )
        if (email := change.changes.get("email", "").lower()) and email in taken:
            del change.changes["email"]
            change.refused = _("%(email)s is the e-mail of another account") % {"email": member["email"]}
        taken.add(email)
        found[index] = (user, change)
    return found


def roster_sync(*, course: Course, members: list[dict], by) -> RosterSync:
    """Make the roster of ``course`` equal to ``members`` (dicts with ``ROSTER_COLUMNS``), in one transaction.

    Rows are checked and written as a CSV import is (``labs.services.roster``: new accounts are
    made for unknown usernames; a row in error is rejected with its reason and the member it
    names, if any, is kept). Members not listed are removed, except the course's last
    instructors when nobody else would be left to teach. Sending the same body again changes nothing.
    """
    with transaction.atomic():
        # One sync of a course at a time: two LMS calls racing would each remove the other's adds.
        Course.objects.select_for_update().filter(pk=course.pk).first()
        details = _details_of(course.institution, members)
        # The account's own e-mail for the plan: the LMS's new one is checked and saved below.
        planned = [
            {**m, "email": details[i][0].email} if i in details and not details[i][1].refused else m
            for i, m in enumerate(members)
        ]
        plan = roster_apply(course=course, text=_as_csv(planned), by=by)
        if plan.error:
            raise RosterError(plan.error)
        result = RosterSync()
        listed: set[int] = set()
        rejected_names: set[str] = set()
        rejected_emails: set[str] = set()
        for row in plan.rows:
            index = row.line - 2
            action, reason = _RESULT_OF[row.action], row.message
            user, change = details.get(index, (None, DetailsChange()))
            if change.refused and row.action == Action.ERROR and row.user_id is None:
                reason = change.refused  # the plan's "has another e-mail address", said precisely
            elif change.changes and row.action != Action.ERROR:
                reason = "; ".join(filter(None, [reason, details_describe(user, change.changes)]))
                details_apply(user=user, changes=change.changes, institution=course.institution, by=by)
                action = "updated" if action == "unchanged" else action
            result.rows.append(RosterRow(row.username, members[index].get("email") or row.email, row.role, action, reason, index))
            if row.action == Action.ERROR:
                if row.username:
                    rejected_names.add(row.username)
                elif row.email:
                    rejected_emails.add(row.email)
            elif row.user_id is not None:
                listed.add(row.user_id)
        kept = Q(user_id__in=listed)
        if rejected_names:
            kept |= Q(user__username__in=rejected_names)
        if rejected_emails:
            kept |= Q(user__email__in=rejected_emails)
        leaving = list(
            Enrollment.objects.filter(course=course).exclude(kept).values_list("user_id", "user__username", "user__email", "role")
        )
        staying_instructors = Enrollment.objects.filter(course=course, role=Enrollment.Role.INSTRUCTOR).filter(kept).exists()
        remove: list[int] = []
        for user_id, username, email, role in leaving:
            if role == Enrollment.Role.INSTRUCTOR and not staying_instructors:
                result.rows.append(
                    RosterRow(
                        username, email, role, "rejected", "a course keeps at least one instructor; list one to remove this one"
                    )
                )
                continue
            remove.append(user_id)
            result.rows.append(RosterRow(username, email, role, "removed"))
        if remove:
            Enrollment.objects.filter(course=course, user_id__in=remove).delete()
        counts = {name: result.count(name) for name in ("added", "updated", "unchanged", "removed", "rejected")}
        if counts["added"] or counts["updated"] or counts["removed"]:
            audit_record(
                by=by, action="roster.sync", target=f"course {course.code}", institution=course.institution, after=counts
            )
    return result


# --- sessions ------------------------------------------------------------------------------------


class IdempotencyConflict(Exception):
    """The key was used before with a different request."""


def _request_digest(values: dict) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def session_launch_for(
    *, by, course: Course, template: LabTemplate, student, idempotency_key: str = "", request: dict | None = None
) -> tuple[LabSession, bool]:
    """Launch a session for ``student`` (``labs.services.sessions.session_launch`` decides whether it may).

    With an ``idempotency_key``, the first launch is remembered with a digest of ``request``: the
    same key and request again return the same session (``created`` is ``False``); the same key
    with another request raises ``IdempotencyConflict``. Returns ``(session, created)``, the session
    with its course, template and student, all read in the launch's transaction.
    """
    digest = _request_digest(request or {})
    institution = course.institution
    with transaction.atomic():
        if idempotency_key:
            # Two requests with one key wait for each other here, so the second sees the first's
            # session (rather than racing it to the student's session limit).
            _idempotency_lock(institution.pk, idempotency_key)
            earlier = (
                IdempotencyKey.objects.select_related("session__course", "session__template", "session__student")
                .filter(institution=institution, key=idempotency_key)
                .first()
            )
            if earlier is not None:
                if earlier.request_sha256 != digest:
                    raise IdempotencyConflict()
                return earlier.session, False
        session = session_launch(student=student, course=course, template=template)
        if idempotency_key:
            IdempotencyKey.objects.create(institution=institution, key=idempotency_key, request_sha256=digest, session=session)
        audit_record(
            by=by,
            action="session.launch",
            target=f"{student.get_username()} in {course.code}",
            institution=institution,
            after={"session": str(session.pk), "template": template.slug},
        )
    return session, True


def idempotency_keys_prune(*, now: datetime | None = None) -> int:
    """Delete the idempotency keys made more than ``API_IDEMPOTENCY_RETENTION_HOURS`` ago; returns
    how many. A launch retried with a key older than that makes a new session."""
    cutoff = (now or timezone.now()) - timedelta(hours=settings.API_IDEMPOTENCY_RETENTION_HOURS)
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def _idempotency_lock(institution_id: int, key: str) -> None:
    """Hold a lock on (institution, key) until the transaction ends. PostgreSQL: an advisory lock
    on the key's hash; SQLite's transactions already take its single write lock at the start."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"api-idempotency:{institution_id}:{key}"])


def session_stop_by(*, session: LabSession, by) -> LabSession:
    """Stop ``session`` on the LMS's request (nothing changes when it was ending already); audited
    like an operator's stop. Returns the session as the stop left it, read in the stop's
    transaction: the answer needs no read after the commit."""
    with transaction.atomic():
        session_stop_by_operator(session=session, by=by, reason="requested through the API")
        return LabSession.objects.select_related("course", "template", "student").get(pk=session.pk)
