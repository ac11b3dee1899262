"""Reads for the API. Every function takes the token's institution (or a course already found
through it), so nothing here can return another institution's rows."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from api.models import ApiToken, OAuthClient
from labs.exports import csv_document
from labs.models import Course, CourseQuota, Enrollment, Institution, LabSession, LabTemplate
from labs.selectors.console import term_start
from labs.selectors.operations import OperatorScope
from labs.selectors.usage import usage_spans

MAX_ID = 2**63 - 1


def _id(value) -> int | None:
    """A database id from a URL or query parameter; ``None`` for anything that cannot be one."""
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if 0 < number <= MAX_ID else None


def courses_of(*, institution: Institution) -> QuerySet[Course]:
    return Course.objects.filter(institution=institution).select_related("quota").order_by("code", "term", "pk")


def course_of(*, institution: Institution, course_id, lock: bool = False) -> Course | None:
    """The course, if it is ``institution``'s; ``lock``: its row locked until the transaction ends."""
    pk = _id(course_id)
    if pk is None:
        return None
    courses = courses_of(institution=institution).select_related("institution").filter(pk=pk)
    return (courses.select_for_update(of=("self",)) if lock else courses).first()


def templates_of_course(*, course: Course) -> QuerySet[LabTemplate]:
    return course.templates.order_by("core_percent", "name", "pk")


def catalogue_of(*, institution: Institution) -> QuerySet[LabTemplate]:
    """The institution's catalogue: its templates that are not one course's own."""
    return LabTemplate.objects.filter(institution=institution, course__isnull=True).order_by("core_percent", "name", "pk")


def template_of(*, institution: Institution, ref) -> LabTemplate | None:
    """A template of ``institution`` by id or slug."""
    templates = LabTemplate.objects.filter(institution=institution)
    pk = _id(ref)
    return templates.filter(pk=pk).first() if pk is not None else templates.filter(slug=str(ref)).first()


def roster_of(*, course: Course) -> QuerySet[Enrollment]:
    return Enrollment.objects.filter(course=course).select_related("user").order_by("user__username")


def sessions_of(*, institution: Institution) -> QuerySet[LabSession]:
    return (
        LabSession.objects.filter(course__institution=institution)
        .select_related("student", "course", "template")
        .order_by("-created_at", "pk")
    )


# The columns the sessions list answers with (``api.serializers.SessionSerializer``): an LMS polls
# the list of a class while it starts, and the sessions' other columns and those of their
# students, courses and templates cost reading and converting on every row of every poll.
SESSION_LIST_FIELDS = (
    "id", "course", "course__code", "template", "template__slug", "template__name", "student", "student__username",
    "state", "reason_code", "reason_params", "created_at", "running_at", "ended_at", "access_url",
)  # fmt: skip


def session_list_of(*, institution: Institution) -> QuerySet[LabSession]:
    """``sessions_of`` with only what the sessions list shows of each read."""
    return sessions_of(institution=institution).only(*SESSION_LIST_FIELDS)


# The same columns as rows (``session_rows``), in the order ``api.serializers.session_rows_data`` reads
# them; ``reason_params_text`` is the reason's parameters as the database's JSON text (``session_rows``).
SESSION_ROW_COLUMNS = (
    "id", "course_id", "course__code", "template__slug", "template__name", "student__username",
    "state", "reason_code", "reason_params_text", "created_at", "running_at", "ended_at", "access_url",
)  # fmt: skip


def session_rows(sessions: QuerySet[LabSession]) -> CountedRows:
    """``sessions`` (``session_list_of``, filtered) as tuples of ``SESSION_ROW_COLUMNS``: no model
    instance per row (a session, its course, template and student were four), which was most of
    what a page of the list cost. The reason's parameters come as text, not decoded on every row:
    a class's sessions share a few reasons, and ``session_rows_data`` decodes each text once.
    Counted (for the page's ``count``) on ``sessions`` itself, without the joins the columns need."""
    rows = sessions.annotate(reason_params_text=Cast("reason_params", TextField())).values_list(*SESSION_ROW_COLUMNS)
    return CountedRows(rows, sessions)


class CountedRows:
    """Rows a paginator slices, counted on the queryset they were read from.

    The rows' query joins the template and the student for their columns; Django's ``count()``
    keeps those joins (it drops only ``select_related``), though every session has both and they
    change no count. A poll of a class of 1,024 counts it once a page: the joins were about half
    of PostgreSQL's time for the count (682 rows: 1.6 ms)."""

    def __init__(self, rows: QuerySet, counted: QuerySet) -> None:
        self.rows = rows
        self.counted = counted

    def count(self) -> int:
        return self.counted.count()

    def __getitem__(self, index):
        return self.rows[index]

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def session_of(*, institution: Institution, session_id) -> LabSession | None:
    try:
        pk = uuid.UUID(str(session_id))
    except ValueError:
        return None
    return sessions_of(institution=institution).filter(pk=pk).first()


def tokens_for(*, scope: OperatorScope) -> QuerySet[ApiToken]:
    tokens = ApiToken.objects.select_related("institution", "created_by").order_by("institution__name", "-created_at")
    return tokens if scope.platform else tokens.filter(institution_id__in=scope.institutions)


def oauth_clients_for(*, scope: OperatorScope) -> QuerySet[OAuthClient]:
    clients = OAuthClient.objects.select_related("institution", "application").order_by("institution__name", "-created_at")
    return clients if scope.platform else clients.filter(institution_id__in=scope.institutions)


# --- ETags ---------------------------------------------------------------------------------------


def etag_of(representation: dict) -> str:
    """A strong ETag of a resource's JSON representation: it changes exactly when what a GET shows changes."""
    text = json.dumps(representation, sort_keys=True, default=str, separators=(",", ":"))
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def quota_of(*, course: Course) -> CourseQuota | None:
    return CourseQuota.objects.filter(course=course).first()


# --- usage ---------------------------------------------------------------------------------------


@dataclass
class UsageRow:
    username: str
    name: str
    sessions: int = 0
    core_percent_hours: float = 0.0  # AI-Core-% x hours held
    gib_hours: float = 0.0  # GiB x hours held


@dataclass(frozen=True)
class Usage:
    since: datetime
    until: datetime
    rows: list[UsageRow]


def course_usage_between(
    *, course: Course, since: datetime | None = None, until: datetime | None = None, student: str = ""
) -> Usage:
    """Per student of ``course``: sessions launched in [since, until) and the NPU time held for
    them in it, read from the usage ledger as the console reads it (AI-Core-% x hours, GiB x
    hours; a lab pre-started for a class is its student's from the claim, and the course's, under
    the reservation's holder, before it). ``since`` defaults to the start of the term, ``until``
    to now; ``student`` narrows to one username."""
    until = until or timezone.now()
    since = since or term_start(course)
    rows: dict[int, UsageRow] = {}
    members = Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).select_related("user")
    sessions = LabSession.objects.filter(course=course, created_at__gte=since, created_at__lt=until)
    students = None
    if student:
        members = members.filter(user__username=student)
        sessions = sessions.filter(student__username=student)
        students = list(get_user_model().objects.filter(username=student).values_list("pk", flat=True))
    for e in members:
        rows[e.user_id] = UsageRow(e.user.get_username(), e.user.get_full_name())
    launched = list(sessions.values_list("student_id", flat=True))
    spans = list(usage_spans(since=since, until=until, courses=[course.pk], students=students))
    others = {s.student_id for s in spans}.union(launched).difference(rows)
    for user in get_user_model().objects.filter(pk__in=others):  # former students, and the course's own part
        rows[user.pk] = UsageRow(user.get_username(), user.get_full_name())
    for student_id in launched:
        rows[student_id].sessions += 1
    for span in spans:
        hours = span.seconds_within(since, until) / 3600
        rows[span.student_id].core_percent_hours += span.core_percent * hours
        rows[span.student_id].gib_hours += span.memory_mib / 1024 * hours
    return Usage(since, until, sorted(rows.values(), key=lambda r: r.username))


USAGE_CSV_HEADER = ["username", "name", "sessions", "core_percent_hours", "gib_hours"]


def usage_csv(usage: Usage) -> str:
    return csv_document(
        USAGE_CSV_HEADER, ([r.username, r.name, r.sessions, r.core_percent_hours, r.gib_hours] for r in usage.rows)
    )


def member_of(*, course: Course, username: str):
    """The user called ``username`` if they are on the course's roster."""
    enrollment = Enrollment.objects.filter(course=course, user__username=username).select_related("user").first()
    return enrollment.user if enrollment is not None else None
