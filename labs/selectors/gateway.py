"""Reads for the course model endpoint: who a key belongs to (the gateway's check), a student's
endpoints, and the tokens a course's students used. Each read is scoped to its course or user."""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from urllib.parse import urlsplit, urlunsplit

from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from labs.domain.states import SessionState
from labs.models import CourseEndpoint, EndpointKey, Enrollment, TokenUsage
from labs.selectors.rows import column, table
from labs.selectors.usage import week_start

# Where portal.asgi routes the gateway (labs.gateway), and the start of every endpoint's URL.
GATEWAY_PREFIX = "/gateway/"
# npk_<key id>_<secret>: the id finds the row, the secret is compared (by its SHA-256) in constant time.
KEY_PATTERN = re.compile(r"npk_([A-Za-z0-9]{12})_([A-Za-z0-9_-]{43})")


def vllm_api_url(access_url: str) -> str:
    """The OpenAI API root (``.../v1``) of a vLLM lab from its access URL (the server's root)."""
    parts = urlsplit(access_url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/v1", "", ""))


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Grant:
    """What the gateway needs to forward one request: whose it is and their limits."""

    endpoint_id: int
    course_id: int
    institution_id: int
    student_id: int
    upstream_url: str  # "": the portal runs the model and it is not running now
    upstream_token: str  # the portal's lab's own API key ("": none)
    requests_per_minute: int
    weekly_tokens: int | None  # None: no budget
    tokens_this_week: int


@dataclass(frozen=True)
class Refusal:
    status: int  # 401: no such key; 403: a key, but not for this (or any usable) endpoint
    code: str
    message: str


def key_grant(*, endpoint_id: int, key: str, now: datetime | None = None) -> Grant | Refusal:
    """Whether ``key`` opens endpoint ``endpoint_id`` now: a :class:`Grant` with the holder's week
    so far, or a :class:`Refusal` (status, OpenAI-style code, message; the message never repeats the key)."""
    now = now or timezone.now()
    invalid = Refusal(401, "invalid_api_key", "Incorrect API key provided.")
    match = KEY_PATTERN.fullmatch(key)
    if match is None:
        return invalid
    key_id, secret = match.groups()
    row = (
        EndpointKey.objects.filter(key_id=key_id, revoked_at__isnull=True).select_related("enrollment__course__endpoint").first()
    )
    if row is None or not hmac.compare_digest(row.secret_sha256, secret_digest(secret)):
        return invalid
    course = row.enrollment.course
    endpoint = getattr(course, "endpoint", None)
    if endpoint is None or endpoint.pk != endpoint_id:
        return Refusal(403, "wrong_endpoint", "This key is for another course's endpoint.")
    today = timezone.localdate(now)
    if course.archived or (course.ends_on is not None and course.ends_on < today):
        return Refusal(403, "course_ended", "The course has ended: its keys no longer work.")
    if not endpoint.enabled:
        return Refusal(403, "endpoint_disabled", "The course's instructor has turned the endpoint off.")
    student_id = row.enrollment.user_id
    upstream_url, upstream_token = endpoint.upstream_url.rstrip("/"), ""
    if not upstream_url:
        lab = endpoint.session
        if lab is not None and lab.state == SessionState.RUNNING and lab.access_url:
            upstream_url, upstream_token = vllm_api_url(lab.access_url), lab.secret
    used = (
        TokenUsage.objects.filter(course_id=course.pk, student_id=student_id, week_start=week_start(now).date())
        .values_list("prompt_tokens", "completion_tokens")
        .first()
    )
    return Grant(
        endpoint_id=endpoint.pk,
        course_id=course.pk,
        institution_id=course.institution_id,
        student_id=student_id,
        upstream_url=upstream_url,
        upstream_token=upstream_token,
        requests_per_minute=endpoint.requests_per_minute,
        weekly_tokens=endpoint.weekly_tokens_per_student,
        tokens_this_week=sum(used) if used else 0,
    )


@dataclass(frozen=True)
class StudentEndpoint:
    enrollment: Enrollment
    endpoint: CourseEndpoint
    key: EndpointKey | None  # the active key (its secret is not kept)
    tokens_this_week: int


def endpoint_of_student(*, user, course_id: int, now: datetime | None = None) -> StudentEndpoint | None:
    """``user``'s view of their course's endpoint; ``None`` when they are not enrolled in the
    course or it has no endpoint."""
    enrollment = Enrollment.objects.filter(user=user, course_id=course_id).select_related("course__endpoint").first()
    if enrollment is None or getattr(enrollment.course, "endpoint", None) is None:
        return None
    now = now or timezone.now()
    key = EndpointKey.objects.filter(enrollment=enrollment, revoked_at__isnull=True).first()
    used = TokenUsage.objects.filter(course_id=course_id, student=user, week_start=week_start(now).date()).first()
    return StudentEndpoint(
        enrollment=enrollment,
        endpoint=enrollment.course.endpoint,
        key=key,
        tokens_this_week=(used.prompt_tokens + used.completion_tokens) if used else 0,
    )


def courses_with_endpoint(*, user) -> set[int]:
    """The courses ``user`` is enrolled in that have an endpoint (the home page's links).

    Written out (``_courses_with_endpoint_sql``, names from the models): every dashboard load asks
    it, and the ORM composing its joins cost about five times running it (docs/framework-overrides.md)."""
    with connection.cursor() as cursor:
        cursor.execute(_courses_with_endpoint_sql(), [user.pk])
        return {course_id for (course_id,) in cursor.fetchall()}


@cache
def _courses_with_endpoint_sql() -> str:
    """The endpoints' courses among the user's enrolments'. Parameter: the user."""
    p = lambda name: column(CourseEndpoint, name, "p")  # noqa: E731
    e = lambda name: column(Enrollment, name, "e")  # noqa: E731
    return (
        f"SELECT {p('course')} FROM {table(CourseEndpoint, 'p')}"
        f" INNER JOIN {table(Enrollment, 'e')} ON {e('course')} = {p('course')} WHERE {e('user')} = %s"
    )


@dataclass(frozen=True)
class StudentTokens:
    student_id: int
    username: str
    week_prompt: int
    week_completion: int
    term_prompt: int
    term_completion: int

    @property
    def week_total(self) -> int:
        return self.week_prompt + self.week_completion

    @property
    def term_total(self) -> int:
        return self.term_prompt + self.term_completion


def course_token_usage(*, course_id: int, now: datetime | None = None) -> list[StudentTokens]:
    """Tokens per enrolled student of the course on its endpoint, this week and all term (every
    week recorded), by username. Only the course's rows: the caller has checked the user may see it."""
    now = now or timezone.now()
    week: date = week_start(now).date()
    term = {
        r["student_id"]: r
        for r in TokenUsage.objects.filter(course_id=course_id)
        .values("student_id")
        .annotate(p=Sum("prompt_tokens"), c=Sum("completion_tokens"))
    }
    this_week = {r.student_id: r for r in TokenUsage.objects.filter(course_id=course_id, week_start=week)}
    students = (
        Enrollment.objects.filter(course_id=course_id, role=Enrollment.Role.STUDENT)
        .select_related("user")
        .order_by("user__username")
    )
    rows = []
    for e in students:
        t, w = term.get(e.user_id), this_week.get(e.user_id)
        rows.append(
            StudentTokens(
                student_id=e.user_id,
                username=e.user.get_username(),
                week_prompt=w.prompt_tokens if w else 0,
                week_completion=w.completion_tokens if w else 0,
                term_prompt=t["p"] if t else 0,
                term_completion=t["c"] if t else 0,
            )
        )
    return rows
