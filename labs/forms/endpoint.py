"""The instructor's form of a course's model endpoint."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from labs.models import Course, CourseEndpoint, LabTemplate

REQUESTS_PER_MINUTE_MAX = 6000


class EndpointForm(forms.ModelForm):
    """Template (the course's vLLM templates), model name, upstream, per-student limits, on/off."""

    # A model server inside the cluster is reached over plain HTTP: a URL without a scheme means http.
    upstream_url = forms.URLField(
        label=_("upstream URL"),
        max_length=300,
        assume_scheme="http",
        required=False,
        help_text=_(
            "Empty: the portal runs the template's vLLM as a lab of the course, from the first request until it is idle. "
            "Or a vLLM server of your own: its OpenAI base URL, ending in /v1."
        ),
    )

    class Meta:
        model = CourseEndpoint
        fields = ["template", "served_model_name", "upstream_url", "requests_per_minute", "weekly_tokens_per_student", "enabled"]
        help_texts = {
            "served_model_name": _("The name students put in a request's \"model\" (vLLM's --served-model-name)."),
        }

    def __init__(self, *args, course: Course, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The course's own offer: the allocation pass admits a course's lab only of a template it offers.
        self.fields["template"].queryset = course.templates.filter(kind=LabTemplate.Kind.VLLM).order_by("name")
        self.fields["template"].empty_label = None
        self.fields["requests_per_minute"].max_value = REQUESTS_PER_MINUTE_MAX
        self.fields["requests_per_minute"].widget.attrs.update(min=1, max=REQUESTS_PER_MINUTE_MAX)

    def clean_requests_per_minute(self) -> int:
        value = self.cleaned_data["requests_per_minute"]
        if not 1 <= value <= REQUESTS_PER_MINUTE_MAX:
            raise forms.ValidationError(_("Between 1 and %(most)s requests a minute.") % {"most": REQUESTS_PER_MINUTE_MAX})
        return value

    def clean_upstream_url(self) -> str:
        value = self.cleaned_data["upstream_url"].rstrip("/")
        if value and not value.startswith(("http://", "https://")):
            raise forms.ValidationError(_("An http:// or https:// URL."))
        return value
