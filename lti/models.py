"""LTI 1.3 persistence: the tool's keys, the platforms (LMSs) registered per institution, and the
mapping of LTI identities, contexts and resource links onto the portal's users, courses and templates.

A registration belongs to one institution and only ever provisions into it: a context maps to a
course of that institution, a resource link to one of its templates.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from labs.encryption import EncryptedTextField
from labs.outbound import validate_outbound_url


class ToolKey(models.Model):
    """An RSA key pair of the tool. One is active (signs); retired ones stay in the JWKS for a grace period."""

    kid = models.CharField(max_length=64, unique=True)
    # PEM, PKCS#8, encrypted in the database (labs.encryption). Never logged, never rendered:
    # __str__ and the admin show the kid only.
    private_key_pem = EncryptedTextField()
    public_key_pem = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["retired_at"], condition=Q(retired_at__isnull=True), name="lti_one_active_key"),
        ]

    def __str__(self) -> str:
        return self.kid

    def __repr__(self) -> str:
        return f"<ToolKey {self.kid}>"


class Registration(models.Model):
    """A platform (LMS) registered with the tool: what the operator copies from the LMS, or what
    the LMS sent through Dynamic Registration (``lti.dynamic_registration``), which stays pending,
    refusing launches, until an operator approves it."""

    class State(models.TextChoices):
        PENDING = "pending", _("waiting for approval")
        ACTIVE = "active", _("active")

    institution = models.ForeignKey("labs.Institution", on_delete=models.PROTECT, related_name="lti_registrations")
    name = models.CharField(_("name"), max_length=200)
    issuer = models.URLField(_("issuer"), max_length=300)
    client_id = models.CharField(_("client ID"), max_length=200)
    auth_login_url = models.URLField(_("authentication (login) URL"), max_length=500)
    auth_token_url = models.URLField(_("access token URL"), max_length=500)
    auth_audience = models.CharField(_("token audience (if not the token URL)"), max_length=500, blank=True)
    keyset_url = models.URLField(_("public keyset (JWKS) URL"), max_length=500)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["issuer", "client_id"], name="lti_registration_unique")]

    def __str__(self) -> str:
        return f"{self.name} ({self.issuer})"

    def clean(self) -> None:
        errors = registration_url_errors({name: getattr(self, name) for name in PLATFORM_URL_FIELDS})
        if self.institution_id is not None and issuer_of_another_institution(self.issuer, self.institution_id, exclude=self.pk):
            errors["issuer"] = [ValidationError(ISSUER_TAKEN)]
        if errors:
            raise ValidationError(errors)


# The platform's URLs: the portal fetches the keyset and access tokens from two of them and sends
# browsers to the third. All three follow the rule of every URL the portal calls (labs.outbound):
# https, no credentials, not a local or private address, unless the settings allow it.
PLATFORM_URL_FIELDS = ("auth_login_url", "auth_token_url", "keyset_url")


def registration_url_errors(fields: dict[str, str]) -> dict[str, list[ValidationError]]:
    """The refusals of ``validate_outbound_url`` for the platform URLs among ``fields``, by field
    name; an empty value is left to the field's own ``required`` check."""
    errors: dict[str, list[ValidationError]] = {}
    for name in PLATFORM_URL_FIELDS:
        if fields.get(name):
            try:
                validate_outbound_url(fields[name])
            except ValidationError as exc:
                errors[name] = exc.error_list
    return errors


# An LMS (its issuer) belongs to one institution: its users' accounts are found by (issuer, subject),
# so a second institution registering the same issuer with keys of its own could sign launches as
# any of them.
ISSUER_TAKEN = _(
    "This issuer is registered for another institution: an LMS belongs to one institution. "
    "A platform operator can remove the other registration first."
)


REGISTRATION_PENDING = _(
    "This LMS registered the tool, but a portal operator has not approved the registration yet; "
    "launches are refused until then. Ask your portal operator to approve it on the LMS page."
)


def issuer_of_another_institution(issuer: str, institution_id: int, *, exclude: int | None = None) -> bool:
    """Whether a registration of another institution than ``institution_id`` has ``issuer``."""
    others = Registration.objects.filter(issuer=issuer).exclude(institution_id=institution_id)
    return (others.exclude(pk=exclude) if exclude else others).exists()


class Deployment(models.Model):
    registration = models.ForeignKey(Registration, on_delete=models.CASCADE, related_name="deployments")
    deployment_id = models.CharField(_("deployment ID"), max_length=200)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["registration", "deployment_id"], name="lti_deployment_unique")]

    def __str__(self) -> str:
        return self.deployment_id


class Identity(models.Model):
    """The portal account of an LMS user: stable by (issuer, sub), whatever the name or e-mail says."""

    registration = models.ForeignKey(Registration, on_delete=models.CASCADE, related_name="identities")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lti_identities")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="lti_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class Context(models.Model):
    """An LMS course (the context claim) mapped onto a portal course of the registration's institution."""

    registration = models.ForeignKey(Registration, on_delete=models.CASCADE, related_name="contexts")
    context_id = models.CharField(max_length=255)
    course = models.OneToOneField("labs.Course", on_delete=models.CASCADE, related_name="lti_context")
    # Names and Role Provisioning Services: the membership URL from the last launch (empty: no NRPS).
    memberships_url = models.URLField(max_length=500, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["registration", "context_id"], name="lti_context_unique")]

    def __str__(self) -> str:
        return f"{self.context_id} -> {self.course_id}"


class ScoreSource(models.TextChoices):
    """What a resource link's score is, chosen by the instructor when they add the activity."""

    COMPLETION = "completion", _("Full marks when the lab ends")
    NPU_TIME = "npu_time", _("Time on the NPU against a target")
    LAB = "lab", _("A score the lab reports")


class ActivityProgress(models.TextChoices):
    """AGS 2.0 ``activityProgress``, in the order a session goes through them."""

    INITIALIZED = "Initialized"
    STARTED = "Started"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"


class ResourceLink(models.Model):
    """A link placed in the LMS course; deep-linked ones name the template they launch."""

    context = models.ForeignKey(Context, on_delete=models.CASCADE, related_name="resource_links")
    resource_link_id = models.CharField(max_length=255)
    template = models.ForeignKey("labs.LabTemplate", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Assignment and Grade Services: post progress and a score to the line item as the student's
    # sessions run and end (lti.grading). The line item is the launch's, or one the tool made in
    # the platform's line item container (``lineitems_url``) the first time it needed one.
    score_on_end = models.BooleanField(default=False)
    lineitem_url = models.URLField(max_length=500, blank=True)
    lineitems_url = models.URLField(max_length=500, blank=True)
    ags_scopes = models.JSONField(default=list, blank=True)
    score_source = models.CharField(max_length=16, choices=ScoreSource.choices, default=ScoreSource.COMPLETION)
    score_maximum = models.PositiveIntegerField(default=1)
    # NPU time: the minutes of running lab that earn the whole score (score_source npu_time).
    target_minutes = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["context", "resource_link_id"], name="lti_resource_link_unique")]

    def __str__(self) -> str:
        return self.resource_link_id


class Score(models.Model):
    """A score or a progress owed to the platform for one session (an outbox row), one per
    ``activity_progress`` the session reaches: written, due, in the transaction of the change
    (the launch, the lab running, its first activity); the ``Completed`` one is written in the
    launch's and made due by the session's end, in the end's transaction. A worker claims a row
    (``lease_until``, a conditional UPDATE), posts it and marks it sent; a failure is tried again
    at ``next_attempt_at``, which beat's sweep also watches, so a lost task or a killed worker
    only delays it. A session's rows go out in the order they happened (``occurred_at``, also
    the score's timestamp, so the platform keeps the latest whatever arrives last)."""

    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        SENT = "sent", _("sent")
        FAILED = "failed", _("failed")

    session = models.ForeignKey("labs.LabSession", on_delete=models.CASCADE, related_name="lti_scores")
    resource_link = models.ForeignKey(ResourceLink, on_delete=models.CASCADE, related_name="scores")
    subject = models.CharField(max_length=255)
    activity_progress = models.CharField(max_length=16, choices=ActivityProgress.choices, default=ActivityProgress.COMPLETED)
    # When the session reached the progress (empty for a Completed row until the session ends).
    occurred_at = models.DateTimeField(null=True, blank=True)
    # The score of a Completed row: the lab's report while it runs, or worked out at the end.
    score_given = models.FloatField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Empty while the session runs; then when the next attempt is due.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["next_attempt_at"], condition=Q(state="pending"), name="lti_score_due")]
        constraints = [models.UniqueConstraint(fields=["session", "activity_progress"], name="lti_score_one_per_progress")]

    def __str__(self) -> str:
        return f"{self.activity_progress} of {self.session_id}: {self.state}"


class LaunchData(models.Model):
    """OIDC state, nonces and validated launches, shared by every web process (PyLTI1p3's launch data storage)."""

    key = models.CharField(max_length=255, unique=True)
    value = models.JSONField()
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.key


class RegistrationLink(models.Model):
    """A one-time Dynamic Registration URL an operator made for an institution: an LMS that opens
    it registers itself into that institution (pending until approved). Only the SHA-256 of the
    token is stored; the URL is shown once."""

    institution = models.ForeignKey("labs.Institution", on_delete=models.CASCADE, related_name="lti_registration_links")
    token_sha256 = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    # Each opening counts, failed ones too: a link cannot be used to make the portal call out for ever.
    attempts = models.PositiveSmallIntegerField(default=0)
    used_at = models.DateTimeField(null=True, blank=True)
    registration = models.ForeignKey(Registration, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    def __str__(self) -> str:
        return f"registration link of {self.institution_id} until {self.expires_at:%Y-%m-%d %H:%M}"


class Lti11Consumer(models.Model):
    """The LTI 1.1 consumer key and shared secret this platform used before LTI 1.3 (the LTI 1.1
    migration): a launch's ``lti1p1`` claim is trusted only when its ``oauth_consumer_key_sign``
    verifies with this secret."""

    registration = models.OneToOneField(Registration, on_delete=models.CASCADE, related_name="lti11_consumer")
    consumer_key = models.CharField(_("LTI 1.1 consumer key"), max_length=255)
    # Encrypted in the database (labs.encryption), like the tool's private keys; never rendered.
    shared_secret = EncryptedTextField(_("LTI 1.1 shared secret"))

    def __str__(self) -> str:
        return f"{self.consumer_key} of {self.registration_id}"


class Lti11User(models.Model):
    """A portal account as the platform knew it under LTI 1.1 (its 1.1 ``user_id``): the first LTI 1.3
    launch that carries this user id in a verified ``lti1p1`` claim links to this account."""

    consumer = models.ForeignKey(Lti11Consumer, on_delete=models.CASCADE, related_name="users")
    lti11_user_id = models.CharField(_("LTI 1.1 user ID"), max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lti11_users")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["consumer", "lti11_user_id"], name="lti11_user_unique")]

    def __str__(self) -> str:
        return f"{self.lti11_user_id} of {self.consumer_id}"
