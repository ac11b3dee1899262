"""The API's representations. Shape and types only: the rules are elsewhere (a course code's
form in the console's form, which the view calls; a quota's fields and limits in
``labs.domain.quota_spec``, from which ``QuotaSerializer`` is made)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from api.fields import StrictCharField, StrictIntegerField
from labs.domain.quota_spec import INT8_MAX, QUOTA_SPEC, QuotaField, Unit
from labs.models import Enrollment, LabSession
from labs.models.sessions import stored_reason_text

# A query parameter sent empty (?until=) where the schema says what its value is.
BLANK_PARAMETER = _("Send a value, or leave the parameter out.")


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, for programs: invalid, not_authenticated, not_found, ...")
    message = serializers.CharField(help_text="For people.")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), help_text="Invalid input only: field → problems."
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


# --- courses -------------------------------------------------------------------------------------


class CourseSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    code = StrictCharField(max_length=64, help_text="Letters, digits, dot, dash or underscore, e.g. AI101.")
    title = StrictCharField(max_length=200)
    term = StrictCharField(max_length=64, help_text="e.g. 2026 Autumn; a code may be used again in another term.")
    starts_on = serializers.DateField(required=False, allow_null=True)
    ends_on = serializers.DateField(required=False, allow_null=True)
    archived_at = serializers.DateTimeField(read_only=True, allow_null=True)


class CoursePatchSerializer(CourseSerializer):
    code = StrictCharField(max_length=64, required=False)
    title = StrictCharField(max_length=200, required=False)
    term = StrictCharField(max_length=64, required=False)


class GridIntegerField(StrictIntegerField):
    """An integer that is a multiple of ``grid`` (``multipleOf`` in the schema: api.schema.GridIntegerFieldExtension).

    The grid is checked where the quota's rules are (``quota_set``), which names the steps below
    and above a value off it; the field only says it."""

    def __init__(self, *, grid: int, **kwargs) -> None:
        self.grid = grid
        super().__init__(**kwargs)


# The API's words for each quota field's unit; the rest of a field's description is the spec's help.
UNIT_WORDS = {
    Unit.INSTANCES: "Instances.",
    Unit.CORE_PERCENT: "% of one card's AI Core, summed.",
    Unit.MIB: "MiB.",
    Unit.MINUTES: "Minutes.",
    Unit.COUNT: "",
    Unit.CORE_PERCENT_HOURS: "AI-Core-% x hours.",
    Unit.GIB_HOURS: "GiB x hours.",
    Unit.MILLICORES: "Millicores (1000: one core).",
    Unit.TEXT: "",
}


def quota_serializer_field(spec: QuotaField) -> serializers.Field:
    """The API's field for a quota field: its range, grid and default from the spec."""
    words = [UNIT_WORDS[spec.unit]]
    if spec.grid_mib is not None:
        words.append(f"A multiple of {spec.grid_mib} (of 1024 where the nodes allocate memory in 1 GiB steps).")
    if spec.help:
        words.append(spec.help)
    if spec.optional and spec.default is None:
        words.append("null: none.")
    common: dict = {"help_text": " ".join(w for w in words if w)}
    if spec.optional:
        common.update(required=False, default=spec.default, allow_null=spec.default is None)
    if spec.unit is Unit.TEXT:
        # Its form (letters, digits, - and _) is quota_set's check: a pattern in the schema would
        # make an empty value match two of the schema's alternatives (drf-spectacular's oneOf).
        common["help_text"] += " Letters, digits, hyphens and underscores; empty: none."
        return StrictCharField(max_length=spec.max_length, allow_blank=spec.optional, **common)
    bounds = {"min_value": spec.minimum, "max_value": spec.top}
    if spec.grid_mib is not None:
        return GridIntegerField(grid=spec.grid_mib, **bounds, **common)
    return StrictIntegerField(**bounds, **common)


class QuotaSerializer(serializers.Serializer):
    """A course's quota, field by field as ``labs.domain.quota_spec`` says; memory in MiB (a multiple of
    the nodes' step, 128 MiB or 1 GiB); empty borrow/lend limits: none. The guarantee is checked
    against the cluster's healthy cards beside the other courses' guarantees (a 400 names them)
    and the institution's allotment by ``quota_set``.

    A PUT replaces the whole quota: a field left out takes its default (no extensions, no budget).
    """

    def get_fields(self) -> dict[str, serializers.Field]:
        return {**{spec.name: quota_serializer_field(spec) for spec in QUOTA_SPEC}, **super().get_fields()}


class QuotaResponseSerializer(QuotaSerializer):
    below_use = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text="After a PUT: the guarantee's resources now below what the course uses (nothing is stopped).",
    )


# --- templates -----------------------------------------------------------------------------------


class TemplateSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    kind = serializers.CharField()
    scenario = serializers.CharField()
    core_percent = serializers.IntegerField(help_text="% of one card's AI Core; 100 on whole cards.")
    memory_mib = serializers.IntegerField(help_text="NPU memory cap, MiB; on whole cards each card's whole memory.")
    card_count = serializers.IntegerField(
        help_text="1: a share of one card. More: that many whole cards on one node (100 % AI Core and memory of each)."
    )
    share_policy = serializers.CharField(
        help_text='"elastic": an AI Core floor (core_percent), idle compute lent out; "best-effort": no floor '
        "(core_percent 0), memory only (openFuyao vNPU in soft mode)."
    )
    cpu_request_millicores = serializers.IntegerField(help_text="Host CPU kept for the lab on its node (1000 = one core).")
    cpu_limit_millicores = serializers.IntegerField(help_text="Host CPU the lab may use at most.")
    host_memory_request_mib = serializers.IntegerField(help_text="Host memory kept for the lab on its node, MiB.")
    host_memory_limit_mib = serializers.IntegerField(help_text="Host memory the lab may use at most, MiB.")
    ephemeral_storage_mib = serializers.IntegerField(help_text="Scratch disk of the lab, MiB.")
    offers_smaller_lab = serializers.BooleanField(
        help_text="While a lab of this template waits for free NPU capacity (not for the course's quota), its student "
        "is offered a smaller template of the course that would start at once."
    )
    course = serializers.IntegerField(source="course_id", allow_null=True, help_text="A course's own template; null: catalogue.")


class TemplateOfferSerializer(serializers.Serializer):
    template = StrictCharField(max_length=100, help_text="The template's slug or id, from the institution's catalogue.")


# --- roster --------------------------------------------------------------------------------------


class MemberSerializer(serializers.Serializer):
    username = StrictCharField(max_length=150, required=False, allow_blank=True, default="")
    email = StrictCharField(max_length=254, required=False, allow_blank=True, default="")
    role = serializers.ChoiceField(choices=[r.value for r in Enrollment.Role], default=Enrollment.Role.STUDENT.value)
    first_name = StrictCharField(max_length=150, required=False, allow_blank=True, default="")
    last_name = StrictCharField(max_length=150, required=False, allow_blank=True, default="")


class RosterMemberSerializer(serializers.Serializer):
    username = serializers.CharField(source="user.username")
    email = serializers.CharField(source="user.email")
    role = serializers.CharField()
    first_name = serializers.CharField(source="user.first_name")
    last_name = serializers.CharField(source="user.last_name")


class RosterSerializer(serializers.Serializer):
    members = RosterMemberSerializer(many=True)


class RosterPutSerializer(serializers.Serializer):
    members = MemberSerializer(many=True, max_length=5000, allow_empty=True)


class RosterRowSerializer(serializers.Serializer):
    index = serializers.IntegerField(allow_null=True, help_text="The row's place in the body; null for a removed member.")
    username = serializers.CharField()
    email = serializers.CharField()
    role = serializers.CharField()
    result = serializers.ChoiceField(choices=["added", "updated", "unchanged", "removed", "rejected"])
    reason = serializers.CharField()


class RosterSyncSerializer(serializers.Serializer):
    added = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    removed = serializers.IntegerField()
    rejected = serializers.IntegerField()
    rows = RosterRowSerializer(many=True)


# --- sessions ------------------------------------------------------------------------------------


class SessionSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    course = serializers.IntegerField(source="course_id")
    course_code = serializers.CharField(source="course.code")
    template = serializers.CharField(
        source="template.slug", help_text="The template's `slug`, as a template listing gives it and a launch takes it."
    )
    template_name = serializers.CharField(source="template.name", help_text="The template's name, as the portal's pages show it.")
    student = serializers.CharField(source="student.username")
    state = serializers.ChoiceField(choices=[s.value for s in LabSession.State])
    reason_code = serializers.CharField()
    reason = serializers.CharField(help_text="The reason in words, in the request's language.")
    created_at = serializers.DateTimeField()
    running_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    access_url = serializers.CharField(help_text="Where the student opens the lab once it runs (its token is not included).")


def session_rows_data(rows: Iterable[tuple]) -> list[dict]:
    """What ``SessionSerializer(many=True)`` answers for these sessions, from rows of
    ``api.selectors.SESSION_ROW_COLUMNS``: the same keys and values, rendered to the same JSON (the
    reason in the active language), built without a field object per value. An LMS polls the list
    of a class while it starts; DRF's fields cost three quarters of a page (docs/performance.md).
    Each reason is composed once per page (by its code and its parameters' text, decoded then).
    The times are left as datetimes in the current time zone (times read in UTC not converted
    again when it is UTC) and the ids as UUIDs: the API's renderer (``api.renderers``) writes them
    in C as DRF's ``DateTimeField`` and ``UUIDField`` write them in Python (ISO 8601, ``Z`` for
    UTC), where formatting them here was a quarter of a page. ``tests/api/test_session_rows.py``
    holds the two to the same bytes."""
    zone = timezone.get_current_timezone()
    in_utc = zone is UTC or getattr(zone, "key", None) in ("UTC", "Etc/UTC")  # then a time in UTC is written as it is
    reasons: dict[tuple[str, str | None], str] = {}

    def when(value: datetime | None) -> datetime | None:
        if value is None or (in_utc and value.tzinfo is UTC):
            return value
        return value.astimezone(zone)

    def reason(code: str, params_text: str | None) -> str:
        key = (code, params_text)
        text = reasons.get(key)
        if text is None:
            params = json.loads(params_text) if code and params_text is not None else None
            text = reasons[key] = stored_reason_text(code, params)
        return text

    return [
        {
            "id": pk,
            "course": course_id,
            "course_code": course_code,
            "template": template_slug,
            "template_name": template_name,
            "student": username,
            "state": state,
            "reason_code": reason_code,
            "reason": reason(reason_code, params_text),
            "created_at": when(created_at),
            "running_at": when(running_at),
            "ended_at": when(ended_at),
            "access_url": access_url,
        }
        for (
            pk, course_id, course_code, template_slug, template_name, username,
            state, reason_code, params_text, created_at, running_at, ended_at, access_url,
        ) in rows
    ]  # fmt: skip


class ProgressEventSerializer(serializers.Serializer):
    """What each event of a session's progress stream carries, as JSON in its ``data``."""

    progress = serializers.IntegerField(min_value=0, max_value=100, help_text="How far towards running, in %.")
    state = serializers.ChoiceField(choices=[s.value for s in LabSession.State])
    message = serializers.CharField(allow_blank=True, help_text="The reason in words; empty when there is none.")
    ready = serializers.BooleanField(help_text="The lab runs: the last event; open `url`.")
    failed = serializers.BooleanField(help_text="The launch failed: the last event; `message` says why.")
    url = serializers.CharField(allow_blank=True, help_text="Where the student opens the lab once ready; empty before.")


class JSONTextField(serializers.Field):
    """A string that holds JSON of ``serializer``'s shape (how a server-sent event carries data).
    Described in the schema by api.schema.JSONTextFieldExtension; used for the schema only."""

    def __init__(self, serializer: type[serializers.Serializer], **kwargs) -> None:
        self.serializer = serializer
        super().__init__(**kwargs)


class ProgressStreamEventSerializer(serializers.Serializer):
    """One server-sent event of the progress stream, as an EventSource reads it."""

    event = serializers.ChoiceField(choices=["progress"])
    data = JSONTextField(ProgressEventSerializer)


class LaunchSerializer(serializers.Serializer):
    course = StrictIntegerField(min_value=1, max_value=INT8_MAX)
    template = StrictCharField(max_length=100, help_text="The template's slug or id.")
    student = StrictCharField(max_length=150, help_text="The student's username; they must be enrolled.")


# --- usage ---------------------------------------------------------------------------------------


class UsageRowSerializer(serializers.Serializer):
    username = serializers.CharField()
    name = serializers.CharField()
    sessions = serializers.IntegerField()
    core_percent_hours = serializers.FloatField()
    gib_hours = serializers.FloatField()


class UsageSerializer(serializers.Serializer):
    course = serializers.IntegerField()
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    rows = UsageRowSerializer(many=True)


class UsageQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    student = serializers.CharField(
        max_length=150, required=False, allow_blank=True, help_text="One student's username; empty or left out: everyone."
    )

    def to_internal_value(self, data):
        # DRF reads ?until= in a query string as if it were not sent; the schema says a time.
        blank = {name: [BLANK_PARAMETER] for name in ("since", "until") if data.get(name) == ""}
        if blank:
            raise serializers.ValidationError(blank)
        return super().to_internal_value(data)

    def validate(self, data):
        if data.get("since") and data.get("until") and data["until"] <= data["since"]:
            raise serializers.ValidationError({"until": _("until must be after since.")})
        return data
