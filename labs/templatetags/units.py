"""Sizes and shares in words people read: ``{% load units %}``, then ``{{ memory_mib|gib }}``."""

from __future__ import annotations

from django import template
from django.utils import formats
from django.utils.translation import gettext

register = template.Library()


def gib_text(memory_mib: int | None) -> str:
    """``524288`` → "512 GiB", ``4608`` → "4.5 GiB", ``128`` → "0.125 GiB", in the active language's number format."""
    if memory_mib is None or memory_mib == "":
        return ""
    gib = int(memory_mib) / 1024
    places = 0 if gib == int(gib) else min(3, len(f"{gib:.3f}".rstrip("0").split(".")[1]))
    return gettext("%(amount)s GiB") % {"amount": formats.number_format(gib, places, use_l10n=True, force_grouping=True)}


@register.filter
def gib(memory_mib: int | None) -> str:
    return gib_text(memory_mib)
