"""Institution API tokens and the idempotency keys of launches made with them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class ApiToken(models.Model):
    """A bearer token an LMS uses to act inside one institution, within its ``scopes``.

    Only the SHA-256 of the secret is stored: the token is shown once, when it is made. The
    ``prefix`` (the token's first characters) is stored in clear so people can tell tokens apart.
    """

    institution = models.ForeignKey("labs.Institution", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(_("name"), max_length=100)
    prefix = models.CharField(_("prefix"), max_length=16, db_index=True)
    secret_sha256 = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(_("scopes"), default=list)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["institution", "-created_at"]
        constraints = [models.CheckConstraint(condition=~Q(name=""), name="api_token_named")]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def actor_name(self) -> str:
        """Who the audit log says made a change with this token."""
        return f"api-token:{self.institution.slug}/{self.name}"

    def is_usable(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class OAuthClient(models.Model):
    """An institution's OAuth 2.0 client (client-credentials grant): an LMS back end that asks for
    short-lived access tokens instead of holding an API token. Its scopes bound what it may ask for."""

    application = models.OneToOneField(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL, on_delete=models.CASCADE, related_name="institution_client"
    )
    institution = models.ForeignKey("labs.Institution", on_delete=models.CASCADE, related_name="oauth_clients")
    scopes = models.JSONField(_("scopes"), default=list)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["institution", "-created_at"]

    def __str__(self) -> str:
        return self.application.name

    @property
    def actor_name(self) -> str:
        return f"oauth-client:{self.institution.slug}/{self.application.name}"


class IdempotencyKey(models.Model):
    """A launch made with an ``Idempotency-Key``: the same key and body give the same session again,
    for ``API_IDEMPOTENCY_RETENTION_HOURS`` (then beat deletes the key)."""

    institution = models.ForeignKey("labs.Institution", on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_sha256 = models.CharField(max_length=64)
    session = models.ForeignKey("labs.LabSession", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["institution", "key"], name="idempotency_key_unique")]
        indexes = [models.Index(fields=["created_at"], name="idempotency_key_created")]

    def __str__(self) -> str:
        return f"{self.key} → {self.session_id}"
