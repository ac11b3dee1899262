"""Every label of the portal's forms is in sentence case: "Compute share", not "compute share"
beside "Cards" in the same form (Django capitalises a model field's verbose name for its form;
a label written in a form is shown as written)."""

from __future__ import annotations

import importlib
import inspect

from django import forms
from django.utils.translation import override

FORM_MODULES = (
    "labs.forms.courses",
    "labs.forms.lab_templates",
    "labs.forms.students",
    "labs.views.operator",
    "labs.views.instructor",
    "labs.views.instructor_students",
    "labs.views.student",
    "api.token_pages",
    "webhooks.subscription_pages",
    "accounts.views",
    "lti.views",
)


def form_labels():
    for name in FORM_MODULES:
        module = importlib.import_module(name)
        for _, form in inspect.getmembers(module, inspect.isclass):
            if issubclass(form, forms.BaseForm) and form.__module__ == name:
                for field_name, field in form.base_fields.items():
                    if field.label:
                        yield form, field_name, str(field.label)


def test_every_form_label_starts_with_a_capital(db):
    with override("en"):
        lower = [
            f"  {form.__module__}.{form.__name__}.{field}: {label!r}"
            for form, field, label in form_labels()
            if label[0].islower()
        ]
    assert not lower, "labels in sentence case:\n" + "\n".join(lower)
