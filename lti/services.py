"""LTI write paths, one transaction each: keys, registrations, provisioning from a launch, deep
links and roster sync from the platform (NRPS). The grades owed to it (AGS) are lti.grading's and
lti.outbox's.

A registration provisions only into its own institution: courses are created in it, templates
are looked up in it, and a context already mapped under another registration is never reused.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from labs.domain.states import ACTIVE
from labs.models import Affiliation, Course, Enrollment, Institution, LabSession, LabTemplate
from labs.presentation import label_separator
from labs.services import catalog, roster
from labs.services.affiliations import affiliation_ensure
from labs.services.audit import audit_record
from labs.services.member_details import DetailsChange, details_apply, details_change, details_describe
from lti import grading, lti1p1
from lti.models import (
    ISSUER_TAKEN,
    REGISTRATION_PENDING,
    Context,
    Deployment,
    Identity,
    LaunchData,
    Registration,
    ResourceLink,
    issuer_of_another_institution,
    registration_url_errors,
)
from lti.tool import service_connector

logger = logging.getLogger(__name__)

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership"
DEEP_LINKING_REQUEST = "LtiDeepLinkingRequest"
# Custom parameters a deep link puts on the resource link it creates.
TEMPLATE_PARAM = "npu_template"
SCORE_PARAM = "npu_score_on_end"


class LtiRefused(Exception):
    """A launch or sync the portal will not act on; the message is for the person who launched,
    ``status`` the HTTP status of the page that says so (400 unless the person may not do it: 403)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# --- registrations ------------------------------------------------------------------------------


def registration_save(
    *, by, institution: Institution, fields: dict, deployment_ids: list[str], registration: Registration | None = None
) -> Registration:
    """Create (or update) a platform registration of ``institution`` and set its deployment ids.

    Refused (``ValidationError`` by field, nothing written) when another institution has registered
    the issuer, or a platform URL is not one the portal calls (``registration_url_errors``)."""
    errors = registration_url_errors(fields)
    if issuer_of_another_institution(fields["issuer"], institution.pk, exclude=registration.pk if registration else None):
        errors["issuer"] = [ValidationError(ISSUER_TAKEN)]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        if registration is None:
            registration = Registration.objects.create(institution=institution, **fields)
            action = "lti.registration.create"
        else:
            for name, value in fields.items():
                setattr(registration, name, value)
            registration.save(update_fields=list(fields))
            action = "lti.registration.edit"
        wanted = {d.strip() for d in deployment_ids if d.strip()}
        registration.deployments.exclude(deployment_id__in=wanted).delete()
        for deployment_id in wanted:
            Deployment.objects.get_or_create(registration=registration, deployment_id=deployment_id)
        audit_record(
            by=by,
            action=action,
            target=f"LTI {registration.issuer} {registration.client_id}",
            institution=institution,
            after={**fields, "deployments": sorted(wanted)},
        )
    return registration


def registration_delete(*, by, registration: Registration) -> None:
    with transaction.atomic():
        audit_record(
            by=by,
            action="lti.registration.delete",
            target=f"LTI {registration.issuer} {registration.client_id}",
            institution=registration.institution,
        )
        registration.delete()


# --- launches -----------------------------------------------------------------------------------


def role_from_claims(roles: list[str]) -> str | None:
    """The course role of LTI context ``roles``; ``None`` when none of them is a course role.

    A teaching assistant (a sub-role of Instructor, often sent with Instructor itself) is an
    assistant; Instructor or the context's Administrator an instructor; Learner a student.
    Institution and system roles alone give no course role.
    """
    names = set()
    for role in roles or []:
        if role.startswith(MEMBERSHIP):
            names.add(role[len(MEMBERSHIP) :].lstrip("#/"))
        elif "/" not in role and "#" not in role:
            names.add(role)  # LTI 1.3 allows the short context role names
    if any(name.endswith("#TeachingAssistant") or name == "TeachingAssistant" for name in names):
        return Enrollment.Role.ASSISTANT
    if names & {"Instructor", "Administrator"}:
        return Enrollment.Role.INSTRUCTOR
    if names & {"Learner"} or any(name.startswith("Learner#") for name in names):
        return Enrollment.Role.STUDENT
    return None


def _username(issuer: str, subject: str) -> str:
    # Never the LMS's own login name: it could name an existing portal account.
    return "lti-" + hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:24]


def _user_for(*, registration: Registration, subject: str, given: str, family: str, email: str, legacy=None):
    """The account of (issuer, subject), created the first time unless ``legacy`` (the account the
    platform knew under LTI 1.1, ``lti.lti1p1``) is given: then that one. Name and e-mail follow the
    LMS (``labs.services.member_details``). Returns it and what changed in it (nothing when created)."""
    User = get_user_model()
    identity = Identity.objects.select_related("user", "registration").filter(issuer=registration.issuer, subject=subject).first()
    fields = {"first_name": given[:150], "last_name": family[:150], "email": email[:254]}
    if identity is not None:
        if identity.registration.institution_id != registration.institution_id:
            raise _another_institutions_account(registration)
    else:
        if legacy is not None and not lti1p1.of_institution_only(legacy, registration.institution_id):
            logger.warning("LTI 1.1 link of %s refused: not an account of this institution only", subject)
            raise _another_institutions_account(registration)
        # The same (issuer, subject) under a registration deleted and made again: the same account.
        user = legacy or User.objects.filter(username=_username(registration.issuer, subject)).first()
        if user is not None and user.enrollments.exclude(course__institution_id=registration.institution_id).exists():
            raise _another_institutions_account(registration)
        rostered = None if user is not None else _rostered_account(registration=registration, email=email)
        user = user or rostered
        try:
            # A savepoint: two first launches of one person at once (two tabs) make one account.
            with transaction.atomic():
                if legacy is not None:
                    audit_record(
                        by=None,
                        action="lti.lti11.link",
                        target=f"{legacy.get_username()} as {subject} at {registration.issuer}",
                        institution=registration.institution,
                    )
                elif rostered is not None:
                    # A new password hash (still unusable) ends any invitation link made for it.
                    rostered.set_unusable_password()
                    rostered.save(update_fields=["password"])
                    audit_record(
                        by=None,
                        action="lti.roster_account.link",
                        target=f"{rostered.get_username()} as {subject} at {registration.issuer}",
                        institution=registration.institution,
                    )
                elif user is None or user.has_usable_password():
                    user = User(username=_username(registration.issuer, subject), **fields)
                    user.set_unusable_password()
                    user.save()
                Identity.objects.create(registration=registration, issuer=registration.issuer, subject=subject, user=user)
                affiliation_ensure(user_ids=[user.pk], institution=registration.institution_id, source=Affiliation.Source.LTI)
            return user, DetailsChange()
        except IntegrityError:
            identity = Identity.objects.select_related("user", "registration").get(issuer=registration.issuer, subject=subject)
            if identity.registration.institution_id != registration.institution_id:
                raise _another_institutions_account(registration) from None
    user = identity.user
    affiliation_ensure(user_ids=[user.pk], institution=registration.institution_id, source=Affiliation.Source.LTI)
    # Name and e-mail follow the LMS, but not onto an e-mail another account of the institution has.
    change = details_change(user=user, institution=registration.institution, email=email, first_name=given, last_name=family)
    change.description = details_describe(user, change.changes)
    details_apply(user=user, changes=change.changes, institution=registration.institution)
    return user, change


def _rostered_account(*, registration: Registration, email: str):
    """The account a course roster made for the person launching with ``email``, to sign in with
    from now on rather than a second one (``labs.services.roster``: a CSV import in a course
    linked to this LMS makes accounts with no password, which their LMS signs them in to).

    Only an account nobody has used: made by a roster of this institution and of no other, no
    password, never signed in, no LMS identity, not staff; a member of a course this registration
    is linked to; the only such account with this e-mail. Whoever made it could never sign in
    with it, so it is as new as the account the launch would make, with the roster's name and
    courses. ``None`` otherwise."""
    if not email:
        return None
    User = get_user_model()
    institution = registration.institution_id
    found = list(
        User.objects.filter(
            email__iexact=email,
            last_login__isnull=True,
            is_staff=False,
            is_superuser=False,
            lti_identities__isnull=True,
            affiliations__institution_id=institution,
            affiliations__source=Affiliation.Source.ROSTER,
            enrollments__course__lti_context__registration=registration,
        )
        .exclude(affiliations__in=Affiliation.objects.exclude(institution_id=institution))
        .exclude(enrollments__course__in=Course.objects.exclude(institution_id=institution))
        .distinct()[:2]
    )
    if len(found) != 1 or found[0].has_usable_password():
        return None
    return found[0]


def _another_institutions_account(registration: Registration) -> LtiRefused:
    """The refusal (logged) of a launch through ``registration`` as an account another institution's
    registration of the same issuer made: an LMS account is known to one institution (such
    registrations are refused now; one may predate that)."""
    logger.warning(
        "LTI launch refused: issuer %s is registered for more than one institution (registration %s)",
        registration.issuer,
        registration.pk,
    )
    return LtiRefused(_("This LMS account belongs to another institution of this portal; ask your LMS administrator."))


def _course_for(*, registration: Registration, context_claim: dict) -> tuple[Course, Context]:
    context_id = str(context_claim.get("id") or "")
    if not context_id:
        raise LtiRefused(_("The LMS did not say which course this is (no context)."))
    context = Context.objects.select_related("course").filter(registration=registration, context_id=context_id).first()
    if context is not None:
        return context.course, context
    label = (context_claim.get("label") or context_id)[:48]
    title = (context_claim.get("title") or label)[:200]
    code = label
    suffix = hashlib.sha256(context_id.encode()).hexdigest()[:6]
    if Course.objects.filter(institution=registration.institution, code=code, term="LTI").exists():
        code = f"{label}-{suffix}"
    try:
        # A savepoint: the first launches of a class arrive together; one of them makes the course.
        with transaction.atomic():
            course = Course.objects.create(institution=registration.institution, code=code, title=title, term="LTI")
            context = Context.objects.create(registration=registration, context_id=context_id, course=course)
    except IntegrityError:
        context = Context.objects.select_related("course").get(registration=registration, context_id=context_id)
        return context.course, context
    audit_record(
        by=None,
        action="course.create",
        target=f"course {course.code}",
        institution=registration.institution,
        after={"lti_context": context_id, "title": title},
    )
    return course, context


@dataclass
class LaunchResult:
    user: object
    course: Course
    role: str
    resource_link: ResourceLink | None
    template: LabTemplate | None


def launch_provision(*, registration: Registration, claims: dict) -> LaunchResult:
    """Provision what a validated launch names: the user, the course, the enrolment with its role,
    and the resource link (with the template a deep link put on it). One transaction; raises
    ``LtiRefused`` (nothing written) when the launch lacks a course role or a context, and (403)
    when it is a deep-linking request from anyone but an instructor: only they add activities, so
    nobody else is given an account or an enrolment by one, and (403) through a registration an
    operator has not approved yet."""
    if registration.state != Registration.State.ACTIVE:
        raise LtiRefused(str(REGISTRATION_PENDING), status=403)
    role = role_from_claims(claims.get(CLAIM + "roles") or [])
    if role is None:
        raise LtiRefused(_("The LMS gave you no role in this course (learner, teaching assistant or instructor)."))
    if claims.get(CLAIM + "message_type") == DEEP_LINKING_REQUEST and role != Enrollment.Role.INSTRUCTOR:
        raise LtiRefused(_("Only the course's instructors may add lab activities."), status=403)
    subject = str(claims.get("sub") or "")
    if not subject:
        raise LtiRefused(_("The LMS did not identify you (no subject); anonymous launches are not supported."))
    try:
        legacy = lti1p1.legacy_account(registration=registration, claims=claims)
    except lti1p1.ForgedSignature:
        raise LtiRefused(
            _(
                "The LMS sent an LTI 1.1 account link whose signature is wrong; "
                "ask your LMS administrator to check its LTI 1.1 secret."
            )
        ) from None
    with transaction.atomic():
        user, _change = _user_for(
            registration=registration,
            subject=subject,
            given=claims.get("given_name") or "",
            family=claims.get("family_name") or "",
            email=claims.get("email") or "",
            legacy=legacy,
        )
        course, context = _course_for(registration=registration, context_claim=claims.get(CLAIM + "context") or {})
        nrps = claims.get(NRPS_CLAIM) or {}
        if nrps.get("context_memberships_url") and context.memberships_url != nrps["context_memberships_url"]:
            context.memberships_url = nrps["context_memberships_url"]
            context.save(update_fields=["memberships_url"])
        enrollment = Enrollment.objects.select_for_update().filter(user=user, course=course).first()
        if enrollment is None:
            Enrollment.objects.create(user=user, course=course, role=role)
            audit_record(
                by=None,
                action="roster.add",
                target=f"{user.get_username()} in {course.code}",
                institution=course.institution,
                after={"role": role, "via": "lti"},
            )
        elif enrollment.role != role:
            audit_record(
                by=None,
                action="roster.role",
                target=f"{user.get_username()} in {course.code}",
                institution=course.institution,
                before={"role": enrollment.role},
                after={"role": role, "via": "lti"},
            )
            enrollment.role = role
            enrollment.save(update_fields=["role"])
        link, template = _resource_link(registration=registration, context=context, claims=claims)
    return LaunchResult(user=user, course=course, role=role, resource_link=link, template=template)


def _resource_link(*, registration: Registration, context: Context, claims: dict):
    link_claim = claims.get(CLAIM + "resource_link") or {}
    link_id = str(link_claim.get("id") or "")
    if claims.get(CLAIM + "message_type") != "LtiResourceLinkRequest" or not link_id:
        return None, None
    custom = claims.get(CLAIM + "custom") or {}
    ags = claims.get(AGS_CLAIM) or {}
    link, _ = ResourceLink.objects.get_or_create(context=context, resource_link_id=link_id)
    changed = []
    template_ref = str(custom.get(TEMPLATE_PARAM) or "")
    if template_ref.isdecimal() and link.template_id != int(template_ref):
        # Only a template of the registration's own institution, offered in (or attachable to) this course.
        template = catalog.templates_attachable(course=context.course).filter(pk=int(template_ref)).first()
        template = template or context.course.templates.filter(pk=int(template_ref)).first()
        if template is not None:
            link.template = template
            changed.append("template")
    score_on_end = str(custom.get(SCORE_PARAM) or "").lower() in ("1", "true", "yes")
    score_on_end = score_on_end or bool(custom.get(grading.SOURCE_PARAM))
    if score_on_end != link.score_on_end:
        link.score_on_end = score_on_end
        changed.append("score_on_end")
    for name, value in grading.link_settings(custom).items():
        if getattr(link, name) != value:
            setattr(link, name, value)
            changed.append(name)
    if ags.get("lineitem") and ags["lineitem"] != link.lineitem_url:
        link.lineitem_url = ags["lineitem"]
        changed.append("lineitem_url")
    if ags.get("lineitems") and ags["lineitems"] != link.lineitems_url:
        link.lineitems_url = ags["lineitems"]
        changed.append("lineitems_url")
    if ags.get("scope") is not None and list(ags["scope"]) != link.ags_scopes:
        link.ags_scopes = list(ags["scope"])
        changed.append("ags_scopes")
    if changed:
        link.save(update_fields=changed)
    return link, link.template


def launch_template(*, result: LaunchResult) -> LabSession | None:
    """Launch the resource link's template for a student (unless one of it is open already) and,
    when the link posts grades, owe the platform its progress and score (``grading.scores_owe``).
    ``LaunchRefused`` from the session service passes through: the student page says why."""
    from labs.services.sessions import session_launch

    link, template = result.resource_link, result.template
    if template is None or result.role != Enrollment.Role.STUDENT:
        return None
    if LabSession.objects.filter(student=result.user, course=result.course, template=template, state__in=ACTIVE).exists():
        return None
    with transaction.atomic():
        if not result.course.templates.filter(pk=template.pk).exists():
            catalog.template_attach(course=result.course, template_id=template.pk)
        session = session_launch(student=result.user, course=result.course, template=template)
        if grading.link_grades(link):
            subject = Identity.objects.get(user=result.user, issuer=link.context.registration.issuer).subject
            grading.scores_owe(session=session, link=link, subject=subject)
    return session


def deep_link_choose(*, course: Course, template_id: int, by) -> LabTemplate | None:
    """The template an instructor picked for a deep link, offered in the course from now on;
    ``None`` when it is not the course's or its institution's catalogue's."""
    template = course.templates.filter(pk=template_id).first()
    if template is None:
        template = catalog.template_attach(course=course, template_id=template_id, by=by)
    return template


# --- NRPS ---------------------------------------------------------------------------------------


@dataclass
class SyncReport:
    added: int = 0
    changed: int = 0  # a role, a name or an e-mail
    removed: int = 0
    skipped: int = 0
    updated: list[str] = field(default_factory=list)  # "name: what changed", per member whose details changed
    refused: list[str] = field(default_factory=list)  # "name: why", per member whose new e-mail was refused
    joined: list[str] = field(default_factory=list)  # the names of the members added
    roles: list[str] = field(default_factory=list)  # "name: old → new", per member whose role changed
    left: list[str] = field(default_factory=list)  # the names of the members removed


def roster_sync(*, context: Context, members: list[dict], by=None) -> SyncReport:
    """Apply the platform's membership list to the course: members added with their role, roles
    changed, and members the platform no longer lists (or lists as inactive) removed. Only members
    known through this registration are removed: people added by hand in the console stay.
    Each change goes through ``labs.services.roster`` and is audited there."""
    registration = context.registration
    course = context.course
    report = SyncReport()
    listed: set[int] = set()
    for member in members:
        subject = str(member.get("user_id") or "")
        role = role_from_claims(member.get("roles") or [])
        if not subject or role is None or member.get("status", "Active") != "Active":
            report.skipped += 1
            continue
        with transaction.atomic():
            user, change = _user_for(
                registration=registration,
                subject=subject,
                given=member.get("given_name") or "",
                family=member.get("family_name") or "",
                email=member.get("email") or "",
            )
        listed.add(user.pk)
        if change.refused:
            report.refused.append(f"{user.get_full_name() or user.get_username()}: {change.refused}")
        current = Enrollment.objects.filter(course=course, user=user).values_list("role", flat=True).first()
        try:
            if current is None:
                roster.roster_add(course=course, identifier=user.get_username(), role=role, by=by)
                report.added += 1
                report.joined.append(user.get_full_name() or user.get_username())
            elif current != role:
                roster.roster_set_role(course=course, user_id=user.pk, role=role, by=by)
                report.changed += 1
                report.roles.append(
                    f"{user.get_full_name() or user.get_username()}{label_separator()}"
                    f"{Enrollment.Role(current).label} → {Enrollment.Role(role).label}"
                )
            if current is not None and change.changes:
                report.updated.append(f"{user.get_full_name() or user.get_username()}{label_separator()}{change.description}")
                if current == role:  # else the role change counted the member already
                    report.changed += 1
        except roster.RosterError as exc:
            logger.info("LTI roster sync of course %s: %s", course.pk, exc)
            report.skipped += 1
    managed = Identity.objects.filter(registration=registration).values("user_id")
    gone = Enrollment.objects.filter(course=course, user_id__in=managed).exclude(user_id__in=listed)
    for enrollment in gone.select_related("user"):
        try:
            roster.roster_remove(course=course, user_id=enrollment.user_id, by=by)
            report.removed += 1
            report.left.append(enrollment.user.get_full_name() or enrollment.user.get_username())
        except roster.RosterError as exc:
            logger.info("LTI roster sync of course %s: %s", course.pk, exc)
            report.skipped += 1
    Context.objects.filter(pk=context.pk).update(synced_at=timezone.now())
    return report


def roster_sync_from_platform(*, context_id: int, by=None) -> SyncReport:
    """Fetch the membership from the platform (an access token signed with the tool's key) and apply it."""
    from pylti1p3.names_roles import NamesRolesProvisioningService

    context = Context.objects.select_related("registration", "course").get(pk=context_id)
    if not context.memberships_url:
        raise LtiRefused(_("The LMS has not offered this course's membership service (NRPS) in a launch yet."))
    nrps = NamesRolesProvisioningService(
        service_connector(context.registration), {"context_memberships_url": context.memberships_url}
    )
    members = nrps.get_members()
    return roster_sync(context=context, members=members, by=by)


def _safe_error(exc: Exception) -> str:
    """An error for the log and the row: the type and HTTP status, never a token or a response body."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return f"{type(exc).__name__}{f' HTTP {status}' if status else ''}"[:300]


def contexts_to_sync():
    return Context.objects.exclude(memberships_url="").values_list("pk", flat=True)


def launch_data_prune() -> int:
    """Delete expired OIDC state, nonces and launches; returns how many rows went."""
    deleted, _ = LaunchData.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted
