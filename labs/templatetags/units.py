"""Sizes and shares in words people read: ``{% load units %}``, then ``{{ memory_mib|gib }}``,
``{{ cpu_millicores|cores }}``."""

from __future__ import annotations

from django import template

from labs.presentation import cores_text, gib_text, usage_text

register = template.Library()


@register.filter
def gib(memory_mib: int | None) -> str:
    return gib_text(memory_mib)


@register.filter
def cores(millicores: int | None) -> str:
    return cores_text(millicores)


@register.filter
def usage(amount: float) -> str:
    """NPU time in a usage table: ``0.04`` → "0.04", ``0.001`` → "< 0.01" (``usage_text``)."""
    return usage_text(amount)
