"""Run by tests/selectors/test_written_sql.py in a new interpreter on an SQLite database (the
embedded demo's): the written-out statements answer as the ORM's queries do there too.
Prints one JSON line of what it found."""

import json
from datetime import timedelta

import django

django.setup()

from django.contrib.sessions.backends.db import SessionStore as DjangoStore  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

call_command("migrate", verbosity=0)

from api.authentication import token_read  # noqa: E402
from api.models import ApiToken  # noqa: E402
from api.services import token_create  # noqa: E402
from api.tokens import token_digest, token_prefix  # noqa: E402
from labs.models import (  # noqa: E402
    Allocation,
    BudgetGrant,
    CourseEndpoint,
    CourseQuota,
    Enrollment,
    LabSession,
    UsageRecord,
)
from labs.selectors.courses import enrollments_of_user  # noqa: E402
from labs.selectors.gateway import courses_with_endpoint  # noqa: E402
from labs.selectors.sessions import (  # noqa: E402
    _queue_places,
    _with_relations,
    session_event_payload,
    session_of_user_exists,
    sessions_for_events,
    sessions_of_student,
)
from labs.selectors.usage import student_budgets, usage_spans, week_start  # noqa: E402
from lti.models import Context, ResourceLink, Score  # noqa: E402
from lti.selectors import completed_score_waits  # noqa: E402
from portal.sessions import SessionStore  # noqa: E402
from tests.factories import course_with_students, lti_registration, node_with_cards, usage_ledger  # noqa: E402
from webhooks.hooks import _any_subscription  # noqa: E402
from webhooks.services import subscription_create  # noqa: E402

node_with_cards()
course, templates, students, instructor = course_with_students(3)
# An ended session's record, an open one's allocation, a lab pre-started for a class claimed by a
# student 30 minutes ago: the course's before, theirs after.
ledger = usage_ledger(course, templates, students)
ended, open_, holder = ledger["ended"], ledger["open"], ledger["holder"]
now = timezone.now()


def reference(since, until, **filters):
    """The spans as the ORM reads them (what usage_spans read before it was written out): the
    records, the open allocations, each claimed after its admission split at the claim."""
    rows = [
        (str(r.session_id), r.student_id, r.course_id, r.institution_id, r.started_at, r.ended_at, r.core_percent)
        for r in UsageRecord.objects.all()
    ]
    live = Allocation.objects.filter(released_at__isnull=True)
    for a in live.select_related("session__reservation_slot__reservation", "course"):
        held = (str(a.session_id), a.course_id, a.course.institution_id)
        start, claim = a.created_at, a.session.claimed_at
        if claim is not None and claim > start:
            rows.append((held[0], a.session.reservation_slot.reservation.holder_id, *held[1:], start, claim, a.core_percent))
            start = claim
        rows.append((held[0], a.session.student_id, *held[1:], start, now, a.core_percent))
    wanted = {"course_id__in": 2, "student_id__in": 1, "institution_id__in": 3}
    return sorted(
        (r[0], r[1], r[4], r[5], r[6])
        for r in rows
        if r[4] < min(until, now) and r[5] > since and all(r[wanted[k]] in v for k, v in filters.items())
    )


def spans(since, until, **filters):
    names = {"course_id__in": "courses", "student_id__in": "students", "institution_id__in": "institutions"}
    found = usage_spans(since=since, until=until, now=now, **{names[k]: v for k, v in filters.items()})
    return sorted((s.session_id, s.student_id, s.start, s.end, s.core_percent) for s in found)


windows = [(now - timedelta(days=1), now), (now - timedelta(hours=1), now), (now - timedelta(days=2), now - timedelta(days=1))]
filters = [
    {},
    {"course_id__in": [course.pk]},
    {"student_id__in": [students[1].pk]},
    {"student_id__in": [students[2].pk]},
    {"student_id__in": [holder.pk, students[0].pk]},
    {"institution_id__in": [course.institution_id]},
]
spans_agree = all(spans(lo, hi, **f) == reference(lo, hi, **f) for lo, hi in windows for f in filters)


def payloads(sessions):
    found = {str(s.pk): session_event_payload(s, for_owner=True) for s in sessions}
    for payload in found.values():
        payload.pop("read_at_ms")
    return found


every = [ended.pk, open_.pk]
orm_read = payloads(_with_relations(LabSession.objects.filter(pk__in=every)))
events_agree = payloads(sessions_for_events([str(pk) for pk in every])) == orm_read
dashboard_agrees = all(
    payloads(sessions_of_student(user=s.student)) == {str(s.pk): orm_read[str(s.pk)]}
    for s in LabSession.objects.filter(pk__in=every)
)


def enrolments(user):
    return [
        (e.course.code, e.role, getattr(e.course, "quota", None), [t.pk for t in e.course.templates.all()])
        for e in enrollments_of_user(user=user)
    ]


orm_enrolments = [
    (e.course.code, e.role, getattr(e.course, "quota", None), [t.pk for t in e.course.templates.order_by("core_percent", "name")])
    for e in Enrollment.objects.filter(user=students[0]).select_related("course__quota").order_by("course__code", "pk")
]
enrolments_agree = enrolments(students[0]) == orm_enrolments and enrolments(instructor)[0][1] == "instructor"

other, _, others, _ = course_with_students(1, code="OTHER101")
CourseEndpoint.objects.create(course=course, template=templates[0], served_model_name="m")
endpoints_agree = (
    [courses_with_endpoint(user=u) for u in (students[0], others[0], instructor)]
    == [
        set(CourseEndpoint.objects.filter(course__enrollments__user=u).values_list("course_id", flat=True))
        for u in (students[0], others[0], instructor)
    ]
    == [{course.pk}, set(), {course.pk}]
)

CourseQuota.objects.filter(course__in=[course, other]).update(budget_core_percent_hours=100)
monday = week_start(now).date()
for student, week, hours in ((students[0], monday, 5), (students[0], monday, 7), (students[0], monday - timedelta(days=7), 50)):
    BudgetGrant.objects.create(course=course, student=student, week_start=week, core_percent_hours=hours, gib_hours=hours)
BudgetGrant.objects.create(course=other, student=others[0], week_start=monday, core_percent_hours=3)
pairs = [(course.pk, students[0].pk), (course.pk, students[1].pk), (other.pk, others[0].pk)]
limits = {pair: budget.core_percent_hours for pair, budget in student_budgets(pairs=pairs, now=now).items()}
week_grants = BudgetGrant.objects.filter(week_start=monday)
grants_agree = (
    limits
    == {
        (c, s): 100 + sum(week_grants.filter(course_id=c, student_id=s).values_list("core_percent_hours", flat=True))
        for c, s in pairs
    }
    == {pairs[0]: 112, pairs[1]: 100, pairs[2]: 103}
)
registration = lti_registration(course.institution)
link = ResourceLink.objects.create(
    context=Context.objects.create(registration=registration, context_id="ctx-1", course=course), resource_link_id="l-1"
)
Score.objects.create(session=open_, resource_link=link, subject="s-1")

# Queue places: each course's queue numbered by a window function in the pass's order (queue_at, then id).
waiting = [
    LabSession.objects.create(
        student=member,
        course=where,
        template=templates[0],
        state="queued",
        queue_at=now + timedelta(seconds=i % 2),
        secret=f"q{i}",
    )
    for i, (member, where) in enumerate(
        [(students[0], course), (students[1], course), (students[2], course), (others[0], other)] * 2
    )
]
by_pass = {
    c: list(LabSession.objects.filter(course_id=c, state="queued").order_by("queue_at", "id")) for c in (course.pk, other.pk)
}
expected_places = {s.pk: (by_pass[s.course_id].index(s) + 1, len(by_pass[s.course_id])) for s in waiting}
places_agree = _queue_places([s.pk for s in waiting]) == expected_places and all(
    _queue_places([s.pk]) == {s.pk: expected_places[s.pk]} for s in waiting
)

api_token, api_secret = token_create(institution=course.institution, name="lms", scopes=["sessions:read"])
read_token = token_read(token_prefix(api_secret), token_digest(api_secret))
orm_token = ApiToken.objects.select_related("institution").get(pk=api_token.pk)


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


token_agrees = (
    _fields(read_token) == _fields(orm_token)
    and _fields(read_token.institution) == _fields(orm_token.institution)
    and token_read(token_prefix(api_secret), token_digest(api_secret + "x")) is None
)

store = DjangoStore()
store["_auth_user_id"] = str(students[0].pk)
store.save()
subscribed_before = _any_subscription({str(ended.pk)})
subscription_create(institution=course.institution, url="https://lms.example.edu/h", event_types=["session.queued"])
print(
    json.dumps(
        {
            "vendor": connection.vendor,
            "spans": len(spans(now - timedelta(days=1), now)),
            "spans_agree": spans_agree,
            "events_agree": events_agree,
            "dashboard_agrees": dashboard_agrees,
            "enrolments_agree": enrolments_agree,
            "endpoints_agree": endpoints_agree,  # the dashboard's links to a course's model endpoint
            "grants_agree": grants_agree,  # the week's budget grants in the dashboard's budgets
            "owner": session_of_user_exists(user=students[0], session_id=ended.pk),
            "teacher": session_of_user_exists(user=instructor, session_id=ended.pk),
            "stranger": session_of_user_exists(user=students[2], session_id=ended.pk),
            "session_loads": SessionStore(store.session_key).load() == {"_auth_user_id": str(students[0].pk)},
            "subscribed_before": subscribed_before,
            "subscribed_after": _any_subscription({str(ended.pk), str(open_.pk)}),
            "score_waits": [completed_score_waits(str(open_.pk)), completed_score_waits(str(ended.pk))],
            "places_agree": places_agree,
            "token_agrees": token_agrees,  # the API token's read with its institution
        }
    )
)
