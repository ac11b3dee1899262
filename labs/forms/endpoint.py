"""The instructor's form of a course's model endpoint."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from labs.models import Course, CourseEndpoint, LabTemplate

REQUESTS_PER_MINUTE_MAX = 6000


class EndpointForm(forms.ModelForm):
    """Template (the institution's vLLM templates), model name, upstream, per-student limits, on/off."""

    # A model server inside the cluster is reached over plain HTTP: a URL without a scheme means http.
    upstream_url = forms.URLField(
        label=_("upstream URL"),
        max_length=300,
        assume_scheme="http",
        help_text=_("The vLLM server's OpenAI base URL, ending in /v1, e.g. http://vllm.example:8000/v1."),
    )

    class Meta:
        model = CourseEndpoint
        fields = ["template", "served_model_name", "upstream_url", "requests_per_minute", "weekly_tokens_per_student", "enabled"]
        help_texts = {
            "served_model_name": _("The name students put in a request's \"model\" (vLLM's --served-model-name)."),
        }

    def __init__(self, *args, course: Course, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["template"].queryset = LabTemplate.objects.filter(
            institution_id=course.institution_id, kind=LabTemplate.Kind.VLLM
        ).order_by("name")
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
        if not value.startswith(("http://", "https://")):
            raise forms.ValidationError(_("An http:// or https:// URL."))
        return value
