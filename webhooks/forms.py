"""The rules of a subscription, for the console and the API alike: an https URL without
credentials, events from the catalogue, courses of the subscription's institution."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from labs.models import Course
from webhooks.catalogue import EVENT_TYPES


def validate_webhook_url(url: str) -> None:
    """Refuse what the portal should not post to: plain http (unless ``WEBHOOK_ALLOW_HTTP``), a user
    name or password in the URL, a fragment, and local or private addresses written as such
    (unless ``WEBHOOK_ALLOW_PRIVATE_ADDRESSES``; names are checked again when a delivery is sent)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http"):
        raise ValidationError(_("The URL must start with https://."), code="scheme")
    if parts.scheme == "http" and not settings.WEBHOOK_ALLOW_HTTP:
        raise ValidationError(_("The URL must use https: deliveries carry student data."), code="scheme")
    if parts.username is not None or parts.password is not None:
        raise ValidationError(
            _("Put no user name or password in the URL: the signature tells your LMS the delivery is from the portal."),
            code="credentials",
        )
    if parts.fragment:
        raise ValidationError(_("The URL must not have a fragment (the part after #)."), code="fragment")
    if not settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES and _is_local(parts.hostname or ""):
        raise ValidationError(_("The URL points to a local or private address, which the portal does not call."), code="private")


def _is_local(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return not ipaddress.ip_address(host).is_global
    except ValueError:
        return False


class SubscriptionForm(forms.Form):
    """``institution`` is a field only where the caller may choose one (the console); the API passes it."""

    institution = forms.ModelChoiceField(queryset=None, label=gettext_lazy("Institution"))
    url = forms.URLField(
        label=gettext_lazy("URL"),
        max_length=500,
        assume_scheme="https",
        validators=[validate_webhook_url],
        help_text=gettext_lazy("Where the portal posts the events, e.g. https://lms.example.edu/webhooks/npu-lab."),
    )
    description = forms.CharField(label=gettext_lazy("Description"), max_length=200, required=False)
    event_types = forms.MultipleChoiceField(
        label=gettext_lazy("Events"), choices=list(EVENT_TYPES.items()), widget=forms.CheckboxSelectMultiple
    )
    courses = forms.ModelMultipleChoiceField(
        label=gettext_lazy("Courses"),
        queryset=None,
        required=False,
        help_text=gettext_lazy("None chosen: every course of the institution."),
    )

    def __init__(self, *args, institutions, institution=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fixed_institution = institution
        if institution is not None:
            del self.fields["institution"]
            self.fields["courses"].queryset = Course.objects.filter(institution=institution).order_by("code")
        else:
            self.fields["institution"].queryset = institutions
            only = list(institutions[:2])
            if len(only) == 1:  # an institution's own operator has nothing to choose
                self.fields["institution"].initial = only[0].pk
                self.fields["institution"].empty_label = None
            self.fields["courses"].queryset = (
                Course.objects.filter(institution__in=institutions).select_related("institution").order_by("code")
            )

    def clean(self):
        data = super().clean()
        institution = self.fixed_institution or data.get("institution")
        courses = data.get("courses") or []
        if institution is not None:
            foreign = [c.code for c in courses if c.institution_id != institution.pk]
            if foreign:
                self.add_error(
                    "courses",
                    _("Not a course of %(institution)s: %(courses)s.")
                    % {"institution": institution.name, "courses": ", ".join(foreign)},
                )
        data["institution"] = institution
        return data
