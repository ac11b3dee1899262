"""Reads for the instructor console: who may do what, what the cluster and the institution allow, usage.

Every function takes the asking user or an already-scoped course; nothing here returns
another tenant's rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from enum import StrEnum
from functools import cache

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import Count, Sum
from django.utils import timezone

from labs.domain.states import TERMINAL
from labs.domain.units import CORE_PERCENT_MAX, MEMORY_GRANULE_MIB, Scenario, node_instance_slots
from labs.exports import csv_document
from labs.models import Allocation, Card, Course, CourseQuota, Enrollment, Institution, InstitutionRole, LabSession, Node
from labs.selectors.courses import QuotaUse, staff_courses
from labs.selectors.rows import column, one, table
from labs.selectors.usage import seconds_by_day, usage_spans, week_start


class CourseRole(StrEnum):
    """What a user may do in a course: manage it (instructor) or watch it and stop sessions (assistant)."""

    INSTRUCTOR = "instructor"
    ASSISTANT = "assistant"


def course_role(*, user, course: Course) -> CourseRole | None:
    """The user's role in ``course``: its instructor, an operator of its institution or a superuser
    manage it; its assistants see everything and stop sessions; anyone else, ``None``."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return CourseRole.INSTRUCTOR
    role = Enrollment.objects.filter(user=user, course=course).values_list("role", flat=True).first()
    if role == Enrollment.Role.INSTRUCTOR:
        return CourseRole.INSTRUCTOR
    if InstitutionRole.objects.filter(
        user=user, institution_id=course.institution_id, role=InstitutionRole.Role.OPERATOR
    ).exists():
        return CourseRole.INSTRUCTOR
    if role == Enrollment.Role.ASSISTANT:
        return CourseRole.ASSISTANT
    return None


def course_for_console(*, user, course_id: int) -> tuple[Course, CourseRole] | None:
    course = one(Course.objects.select_related("institution", "quota").filter(pk=course_id))
    if course is None:
        return None
    role = course_role(user=user, course=course)
    return None if role is None else (course, role)


def institutions_for_new_courses(*, user) -> list[Institution]:
    """The institutions where ``user`` may create a course."""
    if user.is_superuser:
        return list(Institution.objects.all())
    return list(Institution.objects.filter(roles__user=user).distinct())


def is_teacher(*, user) -> bool:
    """Whether the user has anything to do in the console (teaches, assists, or may create courses)."""
    return bool(
        user.is_superuser
        or Enrollment.objects.filter(user=user, role__in=Enrollment.STAFF_ROLES).exists()
        or InstitutionRole.objects.filter(user=user).exists()
    )


@dataclass(frozen=True)
class ConsoleLinks:
    teaches: bool
    operates: bool


def console_links(*, user) -> ConsoleLinks:
    """Which console links a page header shows, in one query: ``teaches`` as :func:`is_teacher`,
    ``operates`` as ``operator_scope(user=user) is not None`` (Django's model backend: an active
    user holding ``labs.operate_platform`` directly or through a group). The consoles check again
    with those functions; this only spares every page their four or five queries."""
    if user.is_superuser:
        return ConsoleLinks(teaches=True, operates=True)
    with connection.cursor() as cursor:
        cursor.execute(
            _console_links_sql(),
            {
                "user": user.pk,
                **_staff_role_params(),
                "operator": InstitutionRole.Role.OPERATOR.value,
                "codename": "operate_platform",
                "app_label": "labs",
            },
        )
        row = cursor.fetchone()
    if row is None:
        return ConsoleLinks(teaches=False, operates=False)
    is_active, staff, any_role, operator, platform = (bool(v) for v in row)  # SQLite answers 0 and 1
    return ConsoleLinks(teaches=staff or any_role, operates=operator or (platform and is_active))


@cache
def _staff_role_params() -> dict[str, str]:
    return {f"staff_role_{i}": str(role) for i, role in enumerate(sorted(Enrollment.STAFF_ROLES))}


@cache
def _console_links_sql() -> str:
    """The statement of :func:`console_links`, written out once per process (tables from the models).

    It is on every page; composing it with the ORM (four ``Exists`` of ``OuterRef``) cost ten
    times running it (``bench.request_cost``; docs/framework-overrides.md).
    ``tests/selectors/test_console_links.py`` checks it agrees with the consoles' own checks.
    """
    User = get_user_model()
    user_perm, group_perm, user_group = (
        User.user_permissions.through,
        Group.permissions.through,
        User.groups.through,
    )
    e = lambda name: column(Enrollment, name, "e")  # noqa: E731
    r = lambda name: column(InstitutionRole, name, "r")  # noqa: E731
    p = lambda name: column(Permission, name, "p")  # noqa: E731
    t = lambda name: column(ContentType, name, "t")  # noqa: E731
    up = lambda name: column(user_perm, name, "up")  # noqa: E731
    gp = lambda name: column(group_perm, name, "gp")  # noqa: E731
    ug = lambda name: column(user_group, name, "ug")  # noqa: E731
    u = lambda name: column(User, name, "u")  # noqa: E731
    user_pk = User._meta.pk.name
    staff_roles = ", ".join(f"%({name})s" for name in _staff_role_params())  # PostgreSQL and SQLite (the demo)
    return f"""
        SELECT {u("is_active")},
            EXISTS (SELECT 1 FROM {table(Enrollment, "e")}
                    WHERE {e("user")} = {u(user_pk)} AND {e("role")} IN ({staff_roles})),
            EXISTS (SELECT 1 FROM {table(InstitutionRole, "r")} WHERE {r("user")} = {u(user_pk)}),
            EXISTS (SELECT 1 FROM {table(InstitutionRole, "r")}
                    WHERE {r("user")} = {u(user_pk)} AND {r("role")} = %(operator)s),
            EXISTS (SELECT 1 FROM {table(Permission, "p")}
                    JOIN {table(ContentType, "t")} ON {t("id")} = {p("content_type")}
                    WHERE {p("codename")} = %(codename)s AND {t("app_label")} = %(app_label)s AND (
                        EXISTS (SELECT 1 FROM {table(user_perm, "up")}
                                WHERE {up("permission")} = {p("id")} AND {up("user")} = {u(user_pk)})
                        OR EXISTS (SELECT 1 FROM {table(group_perm, "gp")}
                                   JOIN {table(user_group, "ug")} ON {ug("group")} = {gp("group")}
                                   WHERE {gp("permission")} = {p("id")} AND {ug("user")} = {u(user_pk)})))
        FROM {table(User, "u")}
        WHERE {u(user_pk)} = %(user)s
    """


@dataclass(frozen=True)
class TaughtCourse:
    course: Course
    role: str
    quota: CourseQuota | None
    use: QuotaUse
    students: int
    open_sessions: int


def courses_taught(*, user, include_archived: bool = False) -> list[TaughtCourse]:
    """The courses the user teaches or assists in (operators: their institutions' courses), with use."""
    courses = staff_courses(user=user)
    if not include_archived:
        courses = courses.filter(archived_at__isnull=True)
    courses = list(courses.select_related("quota", "institution").order_by("archived_at", "code", "term"))
    ids = [c.pk for c in courses]
    use = {
        row["course_id"]: QuotaUse(row["core"] or 0, row["memory"] or 0, row["n"])
        for row in Allocation.objects.filter(course_id__in=ids, released_at__isnull=True)
        .values("course_id")
        .annotate(core=Sum("core_percent"), memory=Sum("memory_mib"), n=Count("id"))
    }
    open_counts = dict(
        LabSession.objects.filter(course_id__in=ids)
        .exclude(state__in=TERMINAL)
        .values("course_id")
        .annotate(n=Count("id"))
        .values_list("course_id", "n")
    )
    students = dict(
        Enrollment.objects.filter(course_id__in=ids, role=Enrollment.Role.STUDENT)
        .values("course_id")
        .annotate(n=Count("id"))
        .values_list("course_id", "n")
    )
    roles = dict(Enrollment.objects.filter(user=user, course_id__in=ids).values_list("course_id", "role"))
    return [
        TaughtCourse(
            course=c,
            role=roles.get(c.pk, Enrollment.Role.INSTRUCTOR),
            quota=getattr(c, "quota", None),
            use=use.get(c.pk, QuotaUse(0, 0, 0)),
            students=students.get(c.pk, 0),
            open_sessions=open_counts.get(c.pk, 0),
        )
        for c in courses
    ]


# --- what the cluster and the institution allow -----------------------------------------------


@dataclass(frozen=True)
class ClusterFacts:
    """What the cluster's healthy cards can hold at most, for checking guarantees and templates."""

    cards_by_node: tuple[int, ...]  # the healthy cards of each node
    largest_card_mib: int
    memory_total_mib: int
    memory_step_mib: int  # the step every node allocates memory in (128 MiB, 1 GiB on vNPU-only clusters)

    @property
    def cards(self) -> int:
        return sum(self.cards_by_node)

    def instance_cap(self, scenario: Scenario) -> int:
        """Per node, its cards times the per-card cap but never past the per-node cap (a 16-card
        node: 128 development instances, not 256)."""
        return sum(node_instance_slots(cards, scenario) for cards in self.cards_by_node)

    @property
    def core_total_percent(self) -> int:
        return self.cards * CORE_PERCENT_MAX


def cluster_facts() -> ClusterFacts:
    usable = Card.objects.filter(healthy=True, disabled=False)
    by_node = list(usable.values("node_id").annotate(n=Count("id"), total=Sum("memory_mib")).values_list("n", "total").order_by())
    largest = usable.order_by("-memory_mib").values_list("memory_mib", flat=True).first()
    steps = set(Node.objects.filter(cards__in=usable).values_list("memory_granule_mib", flat=True))
    # A guarantee must be placeable on every node it may land on: the coarsest step wins.
    step = max(steps, default=MEMORY_GRANULE_MIB)
    return ClusterFacts(tuple(n for n, _ in by_node), largest or 0, sum(total for _, total in by_node), step)


@dataclass(frozen=True)
class Allotment:
    """What an institution may guarantee in total, what its other courses hold, and what is left."""

    limit: QuotaUse | None  # per resource None when that resource has no limit
    others: QuotaUse
    left: QuotaUse | None

    def left_of(self, name: str) -> int | None:
        """What is left of ``name``; ``None`` where that resource has no limit."""
        return getattr(self.left, name) if self.left is not None else None


def institution_allotment(*, institution: Institution, excluding: Course | None = None) -> Allotment:
    """The institution's allotment against the guarantees of its live (not archived) courses."""
    quotas = CourseQuota.objects.filter(course__institution=institution, course__archived_at__isnull=True)
    if excluding is not None:
        quotas = quotas.exclude(course=excluding)
    held = quotas.aggregate(core=Sum("core_percent"), memory=Sum("memory_mib"), n=Sum("instance_count"))
    others = QuotaUse(held["core"] or 0, held["memory"] or 0, held["n"] or 0)
    limits = (institution.allot_core_percent, institution.allot_memory_mib, institution.allot_instances)
    if all(v is None for v in limits):
        return Allotment(None, others, None)
    limit = QuotaUse(*limits)
    left = QuotaUse(
        *(
            None if lim is None else max(0, lim - used)
            for lim, used in zip(limits, (others.core_percent, others.memory_mib, others.instances), strict=True)
        )  # type: ignore[arg-type]
    )
    return Allotment(limit, others, left)


@dataclass(frozen=True)
class GuaranteesHeld:
    """What the live (not archived) courses other than the one being set guarantee: those of its
    institution by code (``own``, largest instance count first), those of other institutions
    together (``elsewhere``, over ``elsewhere_courses`` courses), whose names are not the
    institution's to see."""

    own: tuple[tuple[str, QuotaUse], ...]
    elsewhere: QuotaUse
    elsewhere_courses: int

    @property
    def own_total(self) -> QuotaUse:
        return QuotaUse(*(sum(getattr(u, f) for _, u in self.own) for f in ("core_percent", "memory_mib", "instances")))

    @property
    def total(self) -> QuotaUse:
        own = self.own_total
        return QuotaUse(
            own.core_percent + self.elsewhere.core_percent,
            own.memory_mib + self.elsewhere.memory_mib,
            own.instances + self.elsewhere.instances,
        )


def guarantees_held(*, institution: Institution, excluding: Course | None = None, name_all: bool = False) -> GuaranteesHeld:
    """The guarantees beside which a course of ``institution`` (``excluding`` it) is set;
    ``name_all`` (a platform operator's view): every course by its code."""
    quotas = CourseQuota.objects.filter(course__archived_at__isnull=True).exclude(instance_count=0, core_percent=0, memory_mib=0)
    if excluding is not None and excluding.pk is not None:
        quotas = quotas.exclude(course=excluding)
    own: list[tuple[str, QuotaUse]] = []
    elsewhere, courses = QuotaUse(0, 0, 0), 0
    rows = quotas.values_list("course__code", "course__institution_id", "core_percent", "memory_mib", "instance_count")
    for code, institution_id, core, memory, instances in rows.order_by("-instance_count", "course__code"):
        if name_all or institution_id == institution.pk:
            own.append((code, QuotaUse(core, memory, instances)))
        else:
            elsewhere = QuotaUse(elsewhere.core_percent + core, elsewhere.memory_mib + memory, elsewhere.instances + instances)
            courses += 1
    return GuaranteesHeld(tuple(own), elsewhere, courses)


# --- usage -------------------------------------------------------------------------------------


@dataclass
class StudentUsage:
    username: str
    name: str
    sessions_week: int = 0
    sessions_term: int = 0
    core_hours_week: float = 0.0  # AI-Core-% x hours
    core_hours_term: float = 0.0
    gib_hours_week: float = 0.0  # GiB x hours
    gib_hours_term: float = 0.0


@dataclass
class CourseUsage:
    week_start: datetime
    term_start: datetime
    students: list[StudentUsage]
    days: list[date]
    core_hours_by_day: list[float]
    gib_hours_by_day: list[float]

    @property
    def total(self) -> StudentUsage:
        """Every student's sessions and NPU time together: the term's NPU time is the chart's total."""
        total = StudentUsage("", "")
        for u in self.students:
            total.sessions_week += u.sessions_week
            total.sessions_term += u.sessions_term
            total.core_hours_week += u.core_hours_week
            total.core_hours_term += u.core_hours_term
            total.gib_hours_week += u.gib_hours_week
            total.gib_hours_term += u.gib_hours_term
        return total


def term_start(course: Course) -> datetime:
    """Midnight of the course's first day, or of its first session if that came earlier (a course
    tried out before its term) or the course has no first day."""
    tz = timezone.get_current_timezone()
    first = course.sessions.order_by("created_at").values_list("created_at", flat=True).first()
    days = [d for d in (course.starts_on, timezone.localtime(first).date() if first else None) if d is not None]
    return datetime.combine(min(days, default=timezone.localdate()), time.min, tzinfo=tz)


def course_usage(*, course: Course, now: datetime | None = None) -> CourseUsage:
    """Per student: sessions and NPU time this week (from Monday) and this term, and per day for the chart.

    NPU time is what a session held: its allocation from admission to release (or now), as
    AI-Core-% x hours and GiB x hours; a session that never got an allocation counts as a session only.
    """
    now = now or timezone.now()
    local = timezone.localtime(now)
    week = week_start(now)
    start = term_start(course)
    students: dict[int, StudentUsage] = {}
    for e in (
        Enrollment.objects.filter(course=course, role=Enrollment.Role.STUDENT).select_related("user").order_by("user__username")
    ):
        students[e.user_id] = StudentUsage(e.user.get_username(), e.user.get_full_name())
    days = [(start + timedelta(days=i)).date() for i in range(max(1, (local.date() - start.date()).days + 1))]
    by_day_core = [0.0] * len(days)
    by_day_gib = [0.0] * len(days)

    def usage_of(student_id: int) -> StudentUsage:
        if student_id not in students:  # a former student: still counted in the course's totals
            user = get_user_model().objects.get(pk=student_id)
            students[student_id] = StudentUsage(user.get_username(), user.get_full_name())
        return students[student_id]

    for student_id, created_at in LabSession.objects.filter(course=course, created_at__gte=start, created_at__lt=now).values_list(
        "student_id", "created_at"
    ):
        usage = usage_of(student_id)
        usage.sessions_term += 1
        if created_at >= week:
            usage.sessions_week += 1
    for span in usage_spans(since=start, until=now, courses=[course.pk], now=now):
        usage = usage_of(span.student_id)
        core, gib = span.core_percent, span.memory_mib / 1024
        term_hours = span.seconds_within(start, now) / 3600
        week_hours = span.seconds_within(week, now) / 3600
        usage.core_hours_term += core * term_hours
        usage.gib_hours_term += gib * term_hours
        usage.core_hours_week += core * week_hours
        usage.gib_hours_week += gib * week_hours
        for i, seconds in seconds_by_day(span, days, now):
            by_day_core[i] += core * seconds / 3600
            by_day_gib[i] += gib * seconds / 3600
    ordered = sorted(students.values(), key=lambda u: u.username)
    return CourseUsage(week, start, ordered, days, by_day_core, by_day_gib)


USAGE_CSV_HEADER = [
    "username",
    "name",
    "sessions_this_week",
    "core_percent_hours_this_week",
    "gib_hours_this_week",
    "sessions_this_term",
    "core_percent_hours_this_term",
    "gib_hours_this_term",
]


def course_usage_csv(usage: CourseUsage) -> str:
    return csv_document(
        USAGE_CSV_HEADER,
        (
            [
                u.username,
                u.name,
                u.sessions_week,
                u.core_hours_week,
                u.gib_hours_week,
                u.sessions_term,
                u.core_hours_term,
                u.gib_hours_term,
            ]
            for u in usage.students
        ),
    )


def roster_of(*, course: Course) -> list[Enrollment]:
    return list(Enrollment.objects.filter(course=course).select_related("user").order_by("role", "user__username"))
