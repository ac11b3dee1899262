"""``{% load reasons %}{{ reason|in_words }}``: a ``Reason`` rendered in the reader's language."""

from __future__ import annotations

from django import template
from django.utils.translation import gettext

from labs.domain.reasons import Reason

register = template.Library()


@register.filter
def in_words(reason: Reason | None) -> str:
    return reason.render(gettext) if reason is not None else ""
