"""A course's roster: add, remove, change a role, and import a CSV with a preview.

A CSV import is planned first (``roster_plan``: one ``RowPlan`` per row, nothing written) and
applied only when the instructor confirms (``roster_apply`` plans the same text again and
writes it in one transaction), so a preview never goes stale into the database and a second
import of the same file changes nothing.

The CSV has a header row naming its columns, in any order: ``username`` and/or ``email``
(one is needed per row), optional ``role`` (``student``, ``assistant`` or ``instructor``; empty:
student), optional ``first_name`` and ``last_name``. A user who does not exist yet is created
when the row gives a username, with no password: in a course linked to an LMS they sign in through
it (LTI), their first launch or sync taking the account the roster made (``lti.services``);
otherwise the instructor sends each an invitation link to set a password
(``RosterPlan.sign_in`` says which, before anything is written). In a linked course a row whose
username names no account but whose e-mail is that of a student's LMS account (one made by a
launch or sync through the course's registration) adds that account: no second account is made
(``lms_accounts``). A row with only an e-mail must match an existing account. A row is checked
whole: every problem it has is listed. The import adds and changes; it removes nobody (members
the file does not list stay).

A roster sees only the accounts of its course's institution (``Affiliation``): a row naming
another institution's account, by username or e-mail, is answered exactly as a row naming no
account (a username makes a new account of this institution; an e-mail finds nothing), so a
roster cannot be used to learn who studies elsewhere. A new account is named as the row says,
unless the portal serves several institutions or the name is taken: then it is scoped to the
institution, ``name@institution-slug`` (as eduPersonPrincipalName scopes a login), the same way
whoever else may hold the name.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models.functions import Lower
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from labs.models import Affiliation, Course, Enrollment, Institution
from labs.services.affiliations import affiliation_ensure
from labs.services.audit import audit_record

MAX_ROWS = 5000
MAX_BYTES = 1_000_000
ROLES = {r.value for r in Enrollment.Role}


class RosterError(Exception):
    """A change the roster refuses, with a message for the instructor."""


class Action(StrEnum):
    ADD = "add"
    CREATE = "create"  # a new account, then added
    ROLE = "role"  # a member whose role changes
    UNCHANGED = "unchanged"
    ERROR = "error"


class SignIn(StrEnum):
    """How an account the import makes (it has no password) gets in."""

    LMS = "lms"  # the course is linked to an LMS: its members sign in through it (LTI)
    INVITATION = "invitation"  # the instructor sends an invitation link to set a password


@dataclass
class RowPlan:
    line: int
    username: str
    email: str
    role: str
    action: Action
    change: str = ""  # a role change, "Student → Assistant"
    problems: list[str] = field(default_factory=list)  # every reason the row is rejected
    user_id: int | None = None
    first_name: str = ""
    last_name: str = ""
    lms_account: bool = False  # the account is the student's LMS account, found by the row's e-mail

    @property
    def message(self) -> str:
        return "; ".join(self.problems) or self.change


@dataclass(frozen=True)
class RosterCounts:
    """What a plan does, row by row: the preview shows it and the result reports it, from one plan."""

    add: int  # existing accounts that join
    create: int  # new accounts that join
    update: int  # members whose role changes
    unchanged: int
    rejected: int

    @property
    def joining(self) -> int:
        return self.add + self.create


@dataclass
class RosterPlan:
    rows: list[RowPlan] = field(default_factory=list)
    error: str = ""  # the whole file is refused (not CSV, no usable header, too large)
    sign_in: SignIn = SignIn.INVITATION
    lms: str = ""  # the name of the course's LMS, when ``sign_in`` is ``LMS``

    def count(self, action: Action) -> int:
        return sum(1 for r in self.rows if r.action == action)

    @property
    def counts(self) -> RosterCounts:
        return RosterCounts(
            add=self.count(Action.ADD),
            create=self.count(Action.CREATE),
            update=self.count(Action.ROLE),
            unchanged=self.count(Action.UNCHANGED),
            rejected=self.count(Action.ERROR),
        )

    @property
    def writable(self) -> bool:
        return not self.error and any(r.action in (Action.ADD, Action.CREATE, Action.ROLE) for r in self.rows)


class _Accounts:
    """The accounts of ``institution`` a roster's rows name, looked up in two queries rather than
    one per row. Accounts of other institutions are not looked at: to a roster they do not exist."""

    def __init__(self, institution: Institution, usernames: set[str], emails: set[str]) -> None:
        affiliated = get_user_model().objects.filter(affiliations__institution=institution)
        self.suffix = f"@{institution.slug}"
        names = usernames | {name + self.suffix for name in usernames}
        self.by_username = {u.get_username(): u for u in affiliated.filter(username__in=names)} if usernames else {}
        self.by_email: dict[str, list] = {}
        if emails:
            for user in affiliated.annotate(email_lower=Lower("email")).filter(email_lower__in=emails).order_by("pk"):
                self.by_email.setdefault(user.email.lower(), []).append(user)

    def find(self, username: str, email: str):
        if username:
            # The name as given, or as this institution's roster made it (scoped).
            user = self.by_username.get(username) or self.by_username.get(username + self.suffix)
            if user is not None and email and user.email and user.email.lower() != email.lower():
                return None, _("the account %(username)s has another e-mail address") % {"username": username}
            return user, ""
        users = self.by_email.get(email.lower(), [])
        if len(users) > 1:
            return None, _("more than one account has this e-mail; give the username")
        if not users:
            return None, _("no account has this e-mail; give a username to create one")
        return users[0], ""


def _new_usernames(institution: Institution, wanted: list[str]) -> list[str]:
    """The usernames of new accounts a roster of ``institution`` makes for the names ``wanted``.

    In a portal of one institution a name is kept as given while nobody holds it. Where several
    institutions share the portal every new name is scoped (``name@slug``), whether or not
    another institution holds it, so the name given back tells nothing about other
    institutions' accounts; a scoped name that is taken all the same (an account named so by
    hand) gets a number."""
    User = get_user_model()
    limit = User._meta.get_field(User.USERNAME_FIELD).max_length
    suffix = f"@{institution.slug}"
    scoped = Institution.objects.exclude(pk=institution.pk).exists()

    def scope(name: str, number: int = 1) -> str:
        tail = suffix if number == 1 else f"-{number}{suffix}"
        return name[: limit - len(tail)] + tail

    first = {name: (scope(name) if scoped else name) for name in wanted}
    taken = set(User.objects.filter(username__in={*first.values(), *map(scope, wanted)}).values_list("username", flat=True))
    chosen: list[str] = []
    for name in wanted:
        number = 1
        candidate = first[name] if first[name] not in taken else scope(name)
        # Numbered names were not read above: they are looked up one by one (rare).
        while candidate in taken or (number > 1 and User.objects.filter(username=candidate).exists()):
            number += 1
            candidate = scope(name, number)
        taken.add(candidate)
        chosen.append(candidate)
    return chosen


def _row_problems(entry: RowPlan, seen: set[str]) -> list[str]:
    """Every reason the fields of ``entry`` cannot be imported as they stand (``seen``: the
    usernames and e-mails of the rows before, to which this row's is added)."""
    User = get_user_model()
    problems = []
    username, email = entry.username, entry.email
    if not username and not email:
        problems.append(_("no username and no e-mail"))
    if username:
        try:
            User.username_validator(username)
        except ValidationError:
            problems.append(_("%(username)s is not a valid username") % {"username": username})
    if email:
        try:
            validate_email(email)
        except ValidationError:
            problems.append(_("%(email)s is not an e-mail address") % {"email": email})
    lengths = {"username": username, "email": email, "first_name": entry.first_name, "last_name": entry.last_name}
    for name, value in lengths.items():
        model_field = User._meta.get_field(name)
        if len(value) > model_field.max_length:
            problems.append(
                _("%(field)s is longer than %(limit)s characters")
                % {"field": model_field.verbose_name, "limit": model_field.max_length}
            )
    if entry.role not in ROLES:
        problems.append(_("unknown role %(role)s: use student, assistant or instructor") % {"role": entry.role})
    key = (username or email).lower()
    if key and key in seen:
        problems.append(_("listed twice in this file"))
    seen.add(key)
    return problems


def course_lms(course: Course) -> str:
    """The name of the LMS ``course`` is linked to (its members sign in through it), or ``""``:
    ``settings.ROSTER_COURSE_LMS``, a dotted path to a function of the course (the LTI app's)."""
    return _course_lms_hook()(course) or ""


@lru_cache(maxsize=1)
def _course_lms_hook():
    return import_string(settings.ROSTER_COURSE_LMS)


def lms_accounts(course: Course, emails: set[str]) -> dict[str, list]:
    """The accounts the students of ``course`` sign in with through its LMS, by lower-cased
    e-mail, for the lower-cased ``emails`` (only the course's institution's):
    ``settings.ROSTER_LMS_ACCOUNTS``, a dotted path to a function of the course and the e-mails."""
    return import_string(settings.ROSTER_LMS_ACCOUNTS)(course, emails) if emails else {}


def roster_plan(*, course: Course, text: str) -> RosterPlan:
    """What importing ``text`` would do to the roster of ``course``; writes nothing."""
    if len(text.encode("utf-8", "replace")) > MAX_BYTES:
        return RosterPlan(error=_("The file is larger than 1 MB; split it."))
    text = text.lstrip("\ufeff")  # a BOM from spreadsheet programs
    try:
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip().lower() for h in (reader.fieldnames or [])]
    except csv.Error as exc:
        return RosterPlan(error=_("This is not a CSV file: %(error)s") % {"error": exc})
    if not {"username", "email"} & set(header):
        return RosterPlan(
            error=_("The first row must name the columns, with username or email among them (and optionally role).")
        )
    reader.fieldnames = header
    members = {e.user_id: e.role for e in Enrollment.objects.filter(course=course)}
    plan = RosterPlan()
    seen: set[str] = set()
    instructors_left = sum(1 for r in members.values() if r == Enrollment.Role.INSTRUCTOR)
    try:
        raws = []
        for number, raw in enumerate(reader, start=2):
            if number - 1 > MAX_ROWS:
                return RosterPlan(error=_("The file has more than %(n)s rows; split it.") % {"n": MAX_ROWS})
            raws.append((number, {k: (v or "").strip() for k, v in raw.items() if k}))
    except csv.Error as exc:
        return RosterPlan(error=_("This is not a CSV file: %(error)s") % {"error": exc})
    accounts = _Accounts(
        course.institution,
        {row["username"] for _n, row in raws if row.get("username")},
        {row["email"].lower() for _n, row in raws if row.get("email") and not row.get("username")},
    )
    lms = course_lms(course)
    plan.sign_in, plan.lms = (SignIn.LMS, lms) if lms else (SignIn.INVITATION, "")
    # A linked course's students have an account already once they have signed in through the
    # LMS: a row naming no account of the portal is theirs when its e-mail is, not a second one.
    by_lms = (
        lms_accounts(course, {row["email"].lower() for _n, row in raws if row.get("email") and row.get("username")})
        if lms
        else {}
    )
    matched: set[int] = set()  # the accounts the rows before named
    for number, row in raws:
        if not any(row.values()):
            continue  # a blank line
        entry = RowPlan(number, row.get("username", ""), row.get("email", ""), "", Action.ERROR)
        entry.role = (row.get("role") or Enrollment.Role.STUDENT).lower()
        entry.first_name, entry.last_name = row.get("first_name", ""), row.get("last_name", "")
        plan.rows.append(entry)
        entry.problems = _row_problems(entry, seen)
        if entry.problems:
            continue
        user, problem = accounts.find(entry.username, entry.email)
        if problem:
            entry.problems.append(problem)
            continue
        if user is None and entry.email:
            found = by_lms.get(entry.email.lower(), [])
            if len(found) > 1:
                entry.problems.append(_("more than one account of your LMS has this e-mail; add the student through the LMS"))
                continue
            user = found[0] if found else None
            entry.lms_account = user is not None
            if user is not None and user.pk in matched:
                entry.problems.append(_("listed twice in this file"))
                continue
        if user is not None:
            matched.add(user.pk)
        if user is None:
            entry.action = Action.CREATE
            continue
        entry.user_id = user.pk
        if not entry.lms_account:  # an LMS account's name is the portal's code for it: the row's name is kept
            entry.username = user.get_username()
        current = members.get(user.pk)
        if current is None:
            entry.action = Action.ADD
        elif current == entry.role:
            entry.action = Action.UNCHANGED
        elif current == Enrollment.Role.INSTRUCTOR and instructors_left <= 1:
            entry.problems.append(_("a course keeps at least one instructor; make someone else instructor first"))
        else:
            if current == Enrollment.Role.INSTRUCTOR:
                instructors_left -= 1
            entry.action = Action.ROLE
            entry.change = _("%(old)s → %(new)s") % {
                "old": Enrollment.Role(current).label,
                "new": Enrollment.Role(entry.role).label,
            }
    return plan


def roster_apply(*, course: Course, text: str, by=None) -> RosterPlan:
    """Plan ``text`` again and write it: rows in error are skipped, the rest in one transaction."""
    User = get_user_model()
    with transaction.atomic():
        plan = roster_plan(course=course, text=text)
        if plan.error:
            return plan
        creating = [row for row in plan.rows if row.action == Action.CREATE]
        names = _new_usernames(course.institution, [row.username for row in creating])
        accounts = [
            User(username=name, email=row.email, first_name=row.first_name, last_name=row.last_name)
            for row, name in zip(creating, names, strict=True)
        ]
        for account in accounts:
            account.set_unusable_password()  # their LMS signs them in, or their invitation link sets one
        for row, account in zip(creating, User.objects.bulk_create(accounts, batch_size=1000), strict=True):
            row.user_id = account.pk
        affiliation_ensure(
            user_ids=[row.user_id for row in creating], institution=course.institution, source=Affiliation.Source.ROSTER
        )
        joining = [row for row in plan.rows if row.action in (Action.CREATE, Action.ADD)]
        # ignore_conflicts: someone added meanwhile stays as they were added (get_or_create's answer).
        Enrollment.objects.bulk_create(
            (Enrollment(user_id=row.user_id, course=course, role=row.role) for row in joining),
            batch_size=1000,
            ignore_conflicts=True,
        )
        for row in plan.rows:
            if row.action == Action.ROLE:
                _set_role(course, row.user_id, row.role)
        counts = {action.value: plan.count(action) for action in Action}
        if plan.writable:
            audit_record(
                by=by, action="roster.import", target=f"course {course.code}", institution=course.institution, after=counts
            )
    return plan


def roster_add(*, course: Course, identifier: str, role: str = Enrollment.Role.STUDENT, by=None) -> Enrollment:
    """Add an existing account of the course's institution, by username or e-mail; ``RosterError``
    with the reason otherwise (another institution's account is not found, as an unknown one)."""
    identifier = identifier.strip()
    if role not in ROLES:
        raise RosterError(_("Unknown role %(role)s.") % {"role": role})
    if not identifier:
        raise RosterError(_("Give a username or an e-mail address."))
    # A scoped username (name@slug) has an "@" too: a member's username first, then an e-mail.
    accounts = _Accounts(course.institution, {identifier}, {identifier.lower()} if "@" in identifier else set())
    user, problem = accounts.find(identifier, "")
    if user is None and "@" in identifier:
        user, problem = accounts.find("", identifier)
    if problem or user is None:
        raise RosterError(problem or _("No account is called %(name)s.") % {"name": identifier})
    with transaction.atomic():
        enrollment, created = Enrollment.objects.get_or_create(user=user, course=course, defaults={"role": role})
        if not created:
            raise RosterError(
                _("%(name)s is already a member, as %(role)s.")
                % {"name": user.get_username(), "role": enrollment.get_role_display()}
            )
        audit_record(
            by=by,
            action="roster.add",
            target=f"{user.get_username()} in {course.code}",
            institution=course.institution,
            after={"role": role},
        )
    return enrollment


def _set_role(course: Course, user_id: int, role: str) -> None:
    current = Enrollment.objects.select_for_update().get(course=course, user_id=user_id)
    if current.role == Enrollment.Role.INSTRUCTOR and role != Enrollment.Role.INSTRUCTOR:
        _keep_an_instructor(course, user_id)
    current.role = role
    current.save(update_fields=["role"])


def _keep_an_instructor(course: Course, user_id: int) -> None:
    others = Enrollment.objects.filter(course=course, role=Enrollment.Role.INSTRUCTOR).exclude(user_id=user_id)
    if not others.exists():
        raise RosterError(_("A course keeps at least one instructor; make someone else instructor first."))


def roster_set_role(*, course: Course, user_id: int, role: str, by=None) -> None:
    if role not in ROLES:
        raise RosterError(_("Unknown role %(role)s.") % {"role": role})
    with transaction.atomic():
        member = Enrollment.objects.filter(course=course, user_id=user_id).select_related("user").first()
        if member is None:
            raise RosterError(_("That person is not a member of this course."))
        _set_role(course, user_id, role)
        if member.role != role:
            audit_record(
                by=by,
                action="roster.role",
                target=f"{member.user.get_username()} in {course.code}",
                institution=course.institution,
                before={"role": member.role},
                after={"role": role},
            )


def roster_remove(*, course: Course, user_id: int, by=None) -> None:
    """Remove a member. A student with an open session keeps it until it ends; they cannot launch again."""
    with transaction.atomic():
        enrollment = Enrollment.objects.select_for_update().filter(course=course, user_id=user_id).first()
        if enrollment is None:
            raise RosterError(_("That person is not a member of this course."))
        if enrollment.role == Enrollment.Role.INSTRUCTOR:
            _keep_an_instructor(course, user_id)
        audit_record(
            by=by,
            action="roster.remove",
            target=f"{enrollment.user.get_username()} in {course.code}",
            institution=course.institution,
            before={"role": enrollment.role},
        )
        enrollment.delete()
