"""Writes for the course model endpoint: its settings, the students' keys, the tokens counted."""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from labs.dispatch import controller_wake
from labs.domain.reasons import Reason
from labs.domain.states import ACTIVE, SessionState
from labs.models import Course, CourseEndpoint, EndpointKey, Enrollment, LabSession, LabTemplate, TokenUsage
from labs.selectors.gateway import secret_digest
from labs.selectors.usage import week_start
from labs.services.audit import audit_record
from labs.services.sessions import reason_fields

KEY_ID_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"


def endpoint_set(*, course: Course, values: dict, by) -> CourseEndpoint:
    """Create or change ``course``'s endpoint from a form's cleaned ``values`` (template,
    served_model_name, upstream_url, requests_per_minute, weekly_tokens_per_student, enabled).
    The template must be a vLLM template the course offers (the allocation pass admits no other)."""
    template: LabTemplate = values["template"]
    if template.kind != LabTemplate.Kind.VLLM or not course.templates.filter(pk=template.pk).exists():
        raise ValidationError({"template": _("Choose a vLLM template the course offers.")})
    fields = ["template", "served_model_name", "upstream_url", "requests_per_minute", "weekly_tokens_per_student", "enabled"]
    with transaction.atomic():
        endpoint, created = CourseEndpoint.objects.select_for_update().get_or_create(
            course=course, defaults={f: values[f] for f in fields}
        )
        if not created:
            for f in fields:
                setattr(endpoint, f, values[f])
            endpoint.save(update_fields=fields)
        audit_record(
            by=by,
            action="endpoint.set",
            target=course,
            institution=course.institution,
            after={f: (values[f].pk if f == "template" else values[f]) for f in fields},
        )
    return endpoint


def endpoint_session_wake(*, endpoint_id: int, now: datetime | None = None) -> LabSession | None:
    """Queue the lab that runs the endpoint's model, unless one is open (queued, starting or
    running); the open or new session, or ``None`` when the endpoint has an upstream URL of its
    own or is gone. The endpoint row is locked, so concurrent first requests queue one lab.

    The lab belongs to the endpoint's ``holder`` (an inactive account made here once): it is
    admitted by the allocation pass within the course's quota, and stopped like any lab (idle,
    lifetime), after which the next request queues another.
    """
    now = now or timezone.now()
    with transaction.atomic():
        endpoint = (
            CourseEndpoint.objects.select_for_update(of=("self",))
            .select_related("course", "session")
            .filter(pk=endpoint_id)
            .first()
        )
        if endpoint is None or endpoint.upstream_url:
            return None
        if endpoint.session is not None and endpoint.session.state in ACTIVE:
            return endpoint.session
        if endpoint.holder_id is None:
            holder = get_user_model()(
                username=f"endpoint-{endpoint.course_id}-{uuid.uuid4().hex[:12]}",
                first_name=f"[{endpoint.course.code} model endpoint]",
                is_active=False,
            )
            holder.set_unusable_password()
            holder.save()
            endpoint.holder = holder
        session = LabSession.objects.create(
            student_id=endpoint.holder_id or endpoint.holder.pk,
            course_id=endpoint.course_id,
            template_id=endpoint.template_id,
            state=SessionState.QUEUED,
            queue_at=now,
            secret=secrets.token_urlsafe(32),
            **reason_fields(Reason.of("session.queued")),
        )
        endpoint.session = session
        endpoint.save(update_fields=["holder", "session"])
        controller_wake()
    return session


def endpoint_key_issue(*, enrollment: Enrollment, now: datetime | None = None) -> str:
    """A new key for ``enrollment``'s course endpoint; any key it had stops working. Returns the
    key itself, the only time it exists outside the holder's hands (only its SHA-256 is kept)."""
    now = now or timezone.now()
    key_id = "".join(secrets.choice(KEY_ID_ALPHABET) for _ in range(12))
    secret = secrets.token_urlsafe(32)  # 43 characters, 256 bits
    with transaction.atomic():
        Enrollment.objects.select_for_update().filter(pk=enrollment.pk).first()  # one issue at a time
        EndpointKey.objects.filter(enrollment=enrollment, revoked_at__isnull=True).update(revoked_at=now)
        EndpointKey.objects.create(enrollment=enrollment, key_id=key_id, secret_sha256=secret_digest(secret))
    return f"npk_{key_id}_{secret}"


def endpoint_key_revoke(*, enrollment: Enrollment, now: datetime | None = None) -> int:
    """Revoke ``enrollment``'s key; returns how many were revoked (0 or 1)."""
    with transaction.atomic():
        return EndpointKey.objects.filter(enrollment=enrollment, revoked_at__isnull=True).update(revoked_at=now or timezone.now())


def token_usage_record(
    *,
    course_id: int,
    student_id: int,
    institution_id: int,
    prompt_tokens: int,
    completion_tokens: int,
    now: datetime | None = None,
) -> None:
    """Add one response's tokens to the student's week (one request, whatever its tokens)."""
    if prompt_tokens < 0 or completion_tokens < 0:
        raise ValueError(f"tokens must not be negative: {prompt_tokens}, {completion_tokens}")
    week = week_start(now or timezone.now()).date()
    with transaction.atomic():
        row, _created = TokenUsage.objects.get_or_create(
            course_id=course_id, student_id=student_id, week_start=week, defaults={"institution_id": institution_id}
        )
        TokenUsage.objects.filter(pk=row.pk).update(
            requests=F("requests") + 1,
            prompt_tokens=F("prompt_tokens") + prompt_tokens,
            completion_tokens=F("completion_tokens") + completion_tokens,
        )
