"""Reads of the usage ledger: what sessions held, when, for whom.

A span is one allocation's hold: from its admission to its release (a ``UsageRecord``) or, while
it is still open, to now. Every total here is built from spans clipped to the window asked for,
so a week's figure and a term's agree with each other and with the records, across restarts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from functools import cache, lru_cache

from django.db import connection
from django.db.models import Count, Sum
from django.utils import timezone
from django.utils.translation import gettext

from labs.domain.fairness import decayed
from labs.exports import csv_document
from labs.models import Allocation, BudgetGrant, Course, CourseQuota, LabSession, Reservation, ReservationSlot, UsageRecord
from labs.selectors.rows import Conversion, column, conversion, converted, marks, table


@dataclass(frozen=True, slots=True)
class Span:
    session_id: str
    student_id: int
    course_id: int
    institution_id: int
    template_id: int
    start: datetime
    end: datetime  # the release, or now for an open allocation
    core_percent: int
    memory_mib: int

    def seconds_within(self, since: datetime, until: datetime) -> float:
        return max(0.0, (min(self.end, until) - max(self.start, since)).total_seconds())


def usage_spans(
    *,
    since: datetime,
    until: datetime,
    courses: Iterable[int] | None = None,
    students: Iterable[int] | None = None,
    institutions: Iterable[int] | None = None,
    now: datetime | None = None,
) -> Iterator[Span]:
    """The spans that overlap ``[since, until)``, released ones and open ones; filters narrow them.

    A lab pre-started for a class and claimed after its admission is two spans, as its records
    will be: the course's (its reservation's holder's) from the admission to the claim, the
    student's from the claim.

    One statement written out (``_usage_spans_sql``, names from the models), not three composed by
    the ORM: a launch and the dashboard read a student's spans every time, and composing the
    selects over their joins cost several times running them (docs/framework-overrides.md).
    Prepared on PostgreSQL, as every statement a connection runs again (``DATABASE_PREPARE_THRESHOLD``):
    planning its joins cost PostgreSQL ~15 times executing it.
    """
    now = now or timezone.now()
    filters = [None if ids is None else list(ids) for ids in (courses, students, institutions)]
    if any(ids is not None and not ids for ids in filters):
        return  # an empty filter matches nothing
    prep = UsageRecord._meta.get_field("started_at").get_db_prep_value
    filter_ids = [i for ids in filters for i in ids or ()]
    before = prep(min(until, now), connection)
    params: list[object] = [prep(until, connection), prep(since, connection), *filter_ids]
    if _from_students(filters[1] is not None):
        course_ids, student_ids, institution_ids = (ids or [] for ids in filters)
        params += [*student_ids, before, *course_ids, *institution_ids]
        params += [*student_ids, before, prep(since, connection), *course_ids, *institution_ids]
    else:
        params += [before, *filter_ids, before, prep(since, connection), *filter_ids]
    with connection.cursor() as cursor:
        cursor.execute(_usage_spans_sql(*(None if ids is None else len(ids) for ids in filters)), params)
        rows = cursor.fetchall()
    for session_id, student_id, course_id, institution_id, template_id, start, end, core, memory in converted(
        rows, _usage_span_conversion()
    ):
        yield Span(str(session_id), student_id, course_id, institution_id, template_id, start, end or now, core, memory)


@cache
def _usage_span_conversion() -> Conversion:
    """How the columns of ``_usage_spans_sql`` are converted (as these fields; the integers as given)."""
    get = UsageRecord._meta.get_field
    return conversion((get("session"), None, None, None, None, get("started_at"), get("ended_at"), None, None))


def _from_students(students_given: bool) -> bool:
    """Whether ``_usage_spans_sql`` reads the open allocations from the students' sessions (a few
    students: a launch, a dashboard) rather than from the allocations (PostgreSQL only: SQLite has
    no ``LATERAL``)."""
    return students_given and connection.vendor == "postgresql"


@lru_cache(maxsize=64)  # one statement per shape of filters (how many courses, students, institutions)
def _usage_spans_sql(courses: int | None, students: int | None, institutions: int | None) -> str:
    """Usage records overlapping ``[since, until)``, then open allocations as their student's from
    the later of the admission and the claim (their end is NULL: now), then the course's part of
    open allocations claimed after their admission (to the claim, under the reservation's holder),
    each narrowed by the filters given, as one ``UNION ALL``. Parameters: until, since, the
    filters' ids; min(until, now), the ids; min(until, now), since, the ids.

    Given students, on PostgreSQL (``_from_students``), the open allocations are read from the
    students' sessions (and the reservations they hold), each session's allocation looked up by
    its key (``LATERAL``: that order whatever the planner's estimates), and the students' ids come
    first in those two parts: min(until, now), the courses' and institutions' ids follow. Read
    from the course's open allocations instead, a launch's read grew with the class (a plan made
    while the tables were small scanned every open allocation of the course for the student's:
    0.37 ms of PostgreSQL's time per launch in a class start of 1,024, up to 6.6 ms)."""

    def narrowed(course: str, student: str | None, institution: str) -> str:
        """``AND column IN (...)`` for each filter given, in the parameters' order (``student``
        ``None``: the students are matched elsewhere)."""
        pairs = ((course, courses), (student, students if student else None), (institution, institutions))
        return "".join(f" AND {name} IN ({marks(count)})" for name, count in pairs if count is not None)

    r = lambda name: column(UsageRecord, name, "r")  # noqa: E731
    a = lambda name: column(Allocation, name, "a")  # noqa: E731
    s = lambda name: column(LabSession, name, "s")  # noqa: E731
    c = lambda name: column(Course, name, "c")  # noqa: E731
    t = lambda name: column(ReservationSlot, name, "t")  # noqa: E731
    v = lambda name: column(Reservation, name, "v")  # noqa: E731
    records = (
        f"SELECT {r('session')}, {r('student')}, {r('course')}, {r('institution')}, {r('template')},"
        f" {r('started_at')}, {r('ended_at')}, {r('core_percent')}, {r('memory_mib')}"
        f" FROM {table(UsageRecord, 'r')} WHERE {r('started_at')} < %s AND {r('ended_at')} > %s"
        + narrowed(r("course"), r("student"), r("institution"))
    )
    claimed_later = f"{s('claimed_at')} > {a('created_at')}"
    since_claim = f"CASE WHEN {claimed_later} THEN {s('claimed_at')} ELSE {a('created_at')} END"
    students_columns = (
        f"SELECT {a('session')}, {s('student')}, {a('course')}, {c('institution')}, {s('template')},"
        f" {since_claim}, NULL, {a('core_percent')}, {a('memory_mib')}"
    )
    courses_columns = (
        f"SELECT {a('session')}, {v('holder')}, {a('course')}, {c('institution')}, {s('template')},"
        f" {a('created_at')}, {s('claimed_at')}, {a('core_percent')}, {a('memory_mib')}"
    )
    course_join = f" INNER JOIN {table(Course, 'c')} ON {c('id')} = {a('course')}"
    courses_where = f" WHERE {a('released_at')} IS NULL AND {claimed_later} AND {a('created_at')} < %s AND {s('claimed_at')} > %s"
    if _from_students(students is not None):
        # OFFSET 0: a subquery kept whole, not merged into the join the planner orders.
        allocation = (
            f" CROSS JOIN LATERAL (SELECT * FROM {table(Allocation, 'l')} WHERE {column(Allocation, 'session', 'l')} = {s('id')}"
            f" AND {column(Allocation, 'released_at', 'l')} IS NULL OFFSET 0) a"
        )
        theirs = f"{column(LabSession, 'student', 'm')} IN ({marks(students)})"
        students_part = (
            f"{students_columns} FROM (SELECT * FROM {table(LabSession, 'm')} WHERE {theirs} OFFSET 0) s{allocation}{course_join}"
            f" WHERE {since_claim} < %s" + narrowed(a("course"), None, c("institution"))
        )
        held = f"{column(Reservation, 'holder', 'h')} IN ({marks(students)})"
        slots = (
            f" CROSS JOIN LATERAL (SELECT * FROM {table(ReservationSlot, 'u')}"
            f" WHERE {column(ReservationSlot, 'reservation', 'u')} = {v('id')} OFFSET 0) t"
        )
        sessions = (
            f" CROSS JOIN LATERAL (SELECT * FROM {table(LabSession, 'p')}"
            f" WHERE {column(LabSession, 'reservation_slot', 'p')} = {t('id')} OFFSET 0) s"
        )
        courses_part = (
            f"{courses_columns} FROM (SELECT * FROM {table(Reservation, 'h')} WHERE {held} OFFSET 0) v"
            f"{slots}{sessions}{allocation}{course_join}{courses_where}" + narrowed(a("course"), None, c("institution"))
        )
        return f"{records} UNION ALL {students_part} UNION ALL {courses_part}"
    live = f" FROM {table(Allocation, 'a')} INNER JOIN {table(LabSession, 's')} ON {s('id')} = {a('session')}{course_join}"
    students_part = f"{students_columns}{live} WHERE {a('released_at')} IS NULL AND {since_claim} < %s" + narrowed(
        a("course"), s("student"), c("institution")
    )
    courses_part = (
        f"{courses_columns}{live}"
        f" INNER JOIN {table(ReservationSlot, 't')} ON {t('id')} = {s('reservation_slot')}"
        f" INNER JOIN {table(Reservation, 'v')} ON {v('id')} = {t('reservation')}"
        f"{courses_where}" + narrowed(a("course"), v("holder"), c("institution"))
    )
    return f"{records} UNION ALL {students_part} UNION ALL {courses_part}"


def seconds_by_day(span: Span, days: list[date], now: datetime) -> Iterator[tuple[int, float]]:
    """``(i, seconds)``: how long ``span`` held on ``days[i]`` (local days, consecutive), up to ``now``."""
    tz = timezone.get_current_timezone()
    first = max(0, (timezone.localtime(span.start).date() - days[0]).days)
    last = min(len(days) - 1, (timezone.localtime(span.end).date() - days[0]).days)
    for i in range(first, last + 1):
        lo = datetime.combine(days[i], time.min, tzinfo=tz)
        yield i, span.seconds_within(lo, min(now, lo + timedelta(days=1)))


@dataclass
class Totals:
    core_percent_seconds: float = 0.0
    memory_mib_seconds: float = 0.0

    @property
    def core_percent_hours(self) -> float:
        return self.core_percent_seconds / 3600

    @property
    def gib_hours(self) -> float:
        return self.memory_mib_seconds / 1024 / 3600

    def add(self, span: Span, seconds: float) -> None:
        self.core_percent_seconds += span.core_percent * seconds
        self.memory_mib_seconds += span.memory_mib * seconds


def usage_totals_by_institution(*, now: datetime | None = None) -> dict[str, Totals]:
    """Everything ever held, per institution (by slug): the records' sums and the open allocations up to now.

    Grows only (a counter): an allocation's record, when it closes, is what its open part had reached.
    """
    now = now or timezone.now()
    totals: dict[str, Totals] = {}
    for slug, core, memory in (
        UsageRecord.objects.values("institution__slug")
        .annotate(core=Sum("core_percent_seconds"), memory=Sum("memory_mib_seconds"))
        .values_list("institution__slug", "core", "memory")
        .order_by()
    ):
        totals[slug] = Totals(float(core or 0), float(memory or 0))
    for slug, core, memory, start in Allocation.objects.filter(released_at__isnull=True).values_list(
        "course__institution__slug", "core_percent", "memory_mib", "created_at"
    ):
        seconds = max(0.0, (now - start).total_seconds())
        entry = totals.setdefault(slug, Totals())
        entry.core_percent_seconds += core * seconds
        entry.memory_mib_seconds += memory * seconds
    return totals


@dataclass
class CourseUsageRow:
    institution: str
    course_id: int
    code: str
    term: str
    students: int = 0
    sessions: int = 0
    totals: Totals = field(default_factory=Totals)


@dataclass
class UsageReport:
    since: datetime
    until: datetime
    courses: list[CourseUsageRow]
    days: list[date]
    core_hours_by_day: list[float]
    gib_hours_by_day: list[float]

    @property
    def total(self) -> CourseUsageRow:
        """Every course's sessions and NPU time together (the chart's total); its students are not
        summed, since one student may use several courses."""
        total = CourseUsageRow("", 0, "", "")
        for row in self.courses:
            total.sessions += row.sessions
            total.totals.core_percent_seconds += row.totals.core_percent_seconds
            total.totals.memory_mib_seconds += row.totals.memory_mib_seconds
        return total


def usage_report(*, institutions: Iterable[int] | None, days: int, now: datetime | None = None) -> UsageReport:
    """NPU time per course over the last ``days`` days (to ``now``), and per day for a chart.

    ``institutions``: whose courses (``None``: every institution's, for a platform operator).
    """
    now = now or timezone.now()
    first_day = timezone.localtime(now).date() - timedelta(days=days - 1)
    since = datetime.combine(first_day, time.min, tzinfo=timezone.get_current_timezone())
    day_list = [first_day + timedelta(days=i) for i in range(days)]
    core_by_day, gib_by_day = [0.0] * days, [0.0] * days
    courses = Course.objects.select_related("institution")
    if institutions is not None:
        courses = courses.filter(institution_id__in=list(institutions))
    rows = {
        c.pk: CourseUsageRow(c.institution.name, c.pk, c.code, c.term)
        for c in courses.order_by("institution__name", "code", "term")
    }
    students: dict[int, set[int]] = defaultdict(set)
    # What labs pre-started for a class held before a student claimed them is the course's, under
    # the reservation's holder: counted in the course's totals, not as one more student.
    holders = set(Reservation.objects.filter(course_id__in=list(rows)).values_list("holder_id", flat=True))
    for span in usage_spans(since=since, until=now, courses=list(rows), now=now):
        row = rows[span.course_id]
        row.totals.add(span, span.seconds_within(since, now))
        if span.student_id not in holders:
            students[span.course_id].add(span.student_id)
        for i, seconds in seconds_by_day(span, day_list, now):
            core_by_day[i] += span.core_percent * seconds / 3600
            gib_by_day[i] += span.memory_mib / 1024 * seconds / 3600
    for course_id, n in (
        LabSession.objects.filter(course_id__in=list(rows), created_at__gte=since, created_at__lt=now)
        .values("course_id")
        .annotate(n=Count("id"))
        .values_list("course_id", "n")
        .order_by()
    ):
        rows[course_id].sessions = n
    for course_id, seen in students.items():
        rows[course_id].students = len(seen)
    used = [r for r in rows.values() if r.sessions or r.totals.core_percent_seconds]
    return UsageReport(since, now, used, day_list, core_by_day, gib_by_day)


USAGE_REPORT_CSV_HEADER = ["institution", "course", "term", "students", "sessions", "core_percent_hours", "gib_hours"]


def usage_report_csv(report: UsageReport) -> str:
    return csv_document(
        USAGE_REPORT_CSV_HEADER,
        (
            [r.institution, r.code, r.term, r.students, r.sessions, r.totals.core_percent_hours, r.totals.gib_hours]
            for r in report.courses
        ),
    )


def week_start(now: datetime) -> datetime:
    """Monday 00:00 of ``now``'s week, in the portal's time zone: where weeks (and budgets) begin."""
    local = timezone.localtime(now)
    return (local - timedelta(days=local.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Budget:
    """A student's weekly NPU budget in a course: the limits (the course's plus grants) and what is used."""

    core_percent_hours: float | None  # None: no limit on this resource
    gib_hours: float | None
    used: Totals

    @property
    def fraction(self) -> float:
        """The larger share used of the two limits (1.0: used up)."""
        shares = [
            used / limit if limit else (1.0 if used > 0 else 0.0)
            for used, limit in (
                (self.used.core_percent_hours, self.core_percent_hours),
                (self.used.gib_hours, self.gib_hours),
            )
            if limit is not None
        ]
        return max(shares, default=0.0)

    @property
    def percent(self) -> int:
        return int(self.fraction * 100)


def student_budgets(
    *, pairs: Iterable[tuple[int, int]], now: datetime | None = None, quotas: dict[int, CourseQuota | None] | None = None
) -> dict[tuple[int, int], Budget]:
    """The budgets of ``(course_id, student_id)`` pairs whose course sets one, for the week of ``now``.

    ``quotas``: the courses' quotas (``None`` for a course without one) when the caller has them
    already, e.g. loaded with the enrolments; they are read otherwise.
    """
    now = now or timezone.now()
    pairs = set(pairs)
    courses = {c for c, _ in pairs}
    if quotas is None:
        quotas = {q.course_id: q for q in CourseQuota.objects.filter(course_id__in=courses)}
    quotas = {c: quotas[c] for c in courses if _sets_budget(quotas.get(c))}
    pairs = {p for p in pairs if p[0] in quotas}
    if not pairs:
        return {}
    since = week_start(now)
    spans = usage_spans(since=since, until=now, courses={c for c, _ in pairs}, students={s for _, s in pairs}, now=now)
    return _budgets(pairs, quotas, spans, now)


def _sets_budget(quota: CourseQuota | None) -> bool:
    return quota is not None and (quota.budget_core_percent_hours is not None or quota.budget_gib_hours is not None)


def _budgets(
    pairs: set[tuple[int, int]],
    quotas: dict[int, CourseQuota],
    spans: Iterable[Span],
    now: datetime,
    grants: list[tuple[int, int, int, int]] | None = None,
) -> dict[tuple[int, int], Budget]:
    """The week's budgets from the courses' quotas, the week's grants and spans covering (at least)
    the week. ``grants``: the week's grants to the pairs (course, student, AI-Core-% x hours, GiB x
    hours) when the caller has read them (a launch, with its other facts); else they are read here."""
    since = week_start(now)
    extra: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
    if grants is None:
        courses, students = sorted({c for c, _ in pairs}), sorted({s for _, s in pairs})
        week = BudgetGrant._meta.get_field("week_start").get_db_prep_value(since.date(), connection)
        with connection.cursor() as cursor:
            cursor.execute(_budget_grants_sql(len(courses), len(students)), [*courses, *students, week])
            grants = cursor.fetchall()
    for course_id, student_id, core, gib in grants:
        extra[(course_id, student_id)][0] += core
        extra[(course_id, student_id)][1] += gib
    used: dict[tuple[int, int], Totals] = defaultdict(Totals)
    for span in spans:
        if (span.course_id, span.student_id) in pairs:
            used[(span.course_id, span.student_id)].add(span, span.seconds_within(since, now))
    budgets = {}
    for pair in pairs:
        quota = quotas[pair[0]]
        core_extra, gib_extra = extra.get(pair, (0, 0))
        budgets[pair] = Budget(
            None if quota.budget_core_percent_hours is None else quota.budget_core_percent_hours + core_extra,
            None if quota.budget_gib_hours is None else quota.budget_gib_hours + gib_extra,
            used[pair],
        )
    return budgets


@lru_cache(maxsize=64)  # one statement per shape (how many courses, students)
def _budget_grants_sql(courses: int, students: int) -> str:
    """The grants of a week to any of the students in any of the courses: course, student, AI-Core-%
    x hours, GiB x hours. Written out, as ``usage_spans``: the dashboard reads them every load, and
    the ORM composing the select cost about five times running it. Parameters: the courses, the students,
    the week's Monday."""
    g = lambda name: column(BudgetGrant, name)  # noqa: E731
    return (
        f"SELECT {g('course')}, {g('student')}, {g('core_percent_hours')}, {g('gib_hours')} FROM {table(BudgetGrant)}"
        f" WHERE {g('course')} IN ({marks(courses)}) AND {g('student')} IN ({marks(students)}) AND {g('week_start')} = %s"
    )


def recent_usage_core_percent_hours(
    *, course_id: int, student_id: int, half_life_hours: float, now: datetime | None = None
) -> float:
    """The student's AI-Core-% x hours in the course, each span decayed by how long ago it ended
    (four half-lives back: older use counts for less than 7 %)."""
    now = now or timezone.now()
    if half_life_hours <= 0:
        return 0.0
    since = now - timedelta(hours=4 * half_life_hours)
    spans = usage_spans(since=since, until=now, courses=[course_id], students=[student_id], now=now)
    return _recent_usage(spans, half_life_hours=half_life_hours, now=now)


def _recent_usage(spans: Iterable[Span], *, half_life_hours: float, now: datetime) -> float:
    """Decayed AI-Core-% x hours of ``spans`` (covering at least the last four half-lives; older parts count nothing)."""
    if half_life_hours <= 0:
        return 0.0
    half_life = half_life_hours * 3600
    since = now - timedelta(seconds=4 * half_life)
    total = 0.0
    for span in spans:
        held = span.core_percent * span.seconds_within(since, now) / 3600
        total += decayed(held, (now - span.end).total_seconds(), half_life)
    return total


def launch_usage(
    *,
    course_id: int,
    student_id: int,
    quota: CourseQuota,
    half_life_hours: float,
    now: datetime,
    granted: tuple[int, int],
) -> tuple[Budget | None, float]:
    """What a launch checks: the student's budget in the course this week (``None`` when the
    course sets none; as :func:`student_budgets`) and their decayed recent usage (as
    :func:`recent_usage_core_percent_hours`), from one read of the ledger covering both windows.
    ``granted``: the week's grants to the student in the course (AI-Core-% x hours, GiB x hours),
    read with the launch's other facts (``labs.selectors.sessions.launch_facts``)."""
    windows = []
    if _sets_budget(quota):
        windows.append(week_start(now))
    if half_life_hours > 0:
        windows.append(now - timedelta(hours=4 * half_life_hours))
    if not windows:
        return None, 0.0
    spans = list(usage_spans(since=min(windows), until=now, courses=[course_id], students=[student_id], now=now))
    budget = None
    if _sets_budget(quota):
        pair = (course_id, student_id)
        budget = _budgets({pair}, {course_id: quota}, spans, now, grants=[(*pair, *granted)])[pair]
    return budget, _recent_usage(spans, half_life_hours=half_life_hours, now=now)


def usage_chart(days: list[date], core_hours: list[float], gib_hours: list[float]) -> dict:
    """What the usage chart (``labs/static/labs/console.js``) draws: NPU time per day, labels in the reader's language."""
    return {
        "days": [d.isoformat() for d in days],
        "core": [round(v, 2) for v in core_hours],
        "gib": [round(v, 2) for v in gib_hours],
        "labels": {"core": gettext("AI-Core-% × hours"), "gib": gettext("GiB × hours")},
    }
