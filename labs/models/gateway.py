"""The course model endpoint: one OpenAI-compatible server for a whole class, reached through the
portal's gateway (``labs.gateway``) with a personal key, and the tokens each student used."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _


class CourseEndpoint(models.Model):
    """A course's shared model server and the limits each student has on it.

    Students reach it at ``/gateway/<pk>/v1/`` with a key of theirs for this course; the gateway
    forwards to ``upstream_url`` (a vLLM server's base URL, ending in ``/v1``) when one is given.
    Empty, the portal runs the template's vLLM as a lab of the course (``session``, owned by
    ``holder``, an inactive account as a class reservation's): queued by the first request when
    none is open, and stopped by the idle rule, the lifetime and the course's quota as any lab.
    """

    course = models.OneToOneField("labs.Course", on_delete=models.CASCADE, related_name="endpoint")
    template = models.ForeignKey("labs.LabTemplate", on_delete=models.PROTECT, related_name="+", verbose_name=_("vLLM template"))
    served_model_name = models.CharField(_("served model name"), max_length=200)
    upstream_url = models.URLField(_("upstream URL"), max_length=300, blank=True)
    requests_per_minute = models.PositiveIntegerField(_("requests per minute per student"), default=20)
    # None: no budget. Prompt and completion tokens together, from Monday 00:00 in the portal's time zone.
    weekly_tokens_per_student = models.PositiveIntegerField(
        _("weekly tokens per student"), null=True, blank=True, help_text=_("Prompt and completion tokens. Empty: no budget.")
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    holder = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    session = models.ForeignKey("labs.LabSession", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(requests_per_minute__gte=1), name="endpoint_rate_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.served_model_name} for course {self.course_id}"


class EndpointKey(models.Model):
    """A person's key to their course's endpoint. The key is ``npk_<key_id>_<secret>``; only a
    SHA-256 of the secret is kept, so the key is shown once, when it is issued.

    It belongs to the enrolment: removing the enrolment deletes the key, and the gateway refuses
    a key whose course has ended or been archived. One usable key per enrolment at a time.
    """

    enrollment = models.ForeignKey("labs.Enrollment", on_delete=models.CASCADE, related_name="endpoint_keys")
    key_id = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["enrollment"], condition=Q(revoked_at__isnull=True), name="endpoint_key_one_active_per_enrollment"
            ),
        ]

    def __str__(self) -> str:
        return f"key {self.key_id} of enrolment {self.enrollment_id}"


class TokenUsage(models.Model):
    """The tokens one person used on their course's endpoint in one week, as the responses counted
    them; rows of the usage ledger beside the AI-Core-% × hours of ``UsageRecord``."""

    course = models.ForeignKey("labs.Course", on_delete=models.PROTECT, related_name="token_usage")
    student = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    institution = models.ForeignKey("labs.Institution", on_delete=models.PROTECT, related_name="+")
    week_start = models.DateField()  # the Monday of the week
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["course", "student", "week_start"], name="token_usage_one_per_week"),
        ]

    def __str__(self) -> str:
        return f"{self.student_id} in {self.course_id}, week of {self.week_start}: {self.prompt_tokens}+{self.completion_tokens}"
