"""The rules of a subscription, for the console and the API alike: a URL the portal may call
(``labs.outbound``: https, no credentials, not a local or private address), events from the
catalogue, courses of the subscription's institution."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from labs.models import Course
from labs.outbound import validate_outbound_url
from webhooks.catalogue import EVENT_TYPES


class SubscriptionForm(forms.Form):
    """``institution`` is a field only where the caller may choose one (the console); the API passes it."""

    institution = forms.ModelChoiceField(queryset=None, label=gettext_lazy("Institution"))
    url = forms.URLField(
        label=gettext_lazy("URL"),
        max_length=500,
        assume_scheme="https",
        validators=[validate_outbound_url],
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
