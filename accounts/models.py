from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class Preference(models.Model):
    """What a user chose for themselves, kept with the account so it follows them to every device.

    ``language`` is a code of ``settings.LANGUAGES`` ("en", "zh-hans"); the service checks it, so
    the set of languages can change without a migration. A user without a row has chosen nothing.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference", verbose_name=_("user")
    )
    language = models.CharField(_("language"), max_length=16)
    updated_at = models.DateTimeField(_("changed"), auto_now=True)

    class Meta:
        verbose_name = _("preference")
        verbose_name_plural = _("preferences")
        constraints = [models.CheckConstraint(condition=~models.Q(language=""), name="preference_language_not_empty")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language}"
