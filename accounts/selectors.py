"""Reads of a user's own preferences."""

from __future__ import annotations

import contextlib

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import translation

from accounts.models import Preference


def preferred_language(*, user: AbstractBaseUser) -> str | None:
    """The language ``user`` chose last, as a code of ``settings.LANGUAGES``; ``None`` if they chose
    none or the portal no longer offers it."""
    language = Preference.objects.filter(user=user).values_list("language", flat=True).first()
    if language:
        with contextlib.suppress(LookupError):
            return translation.get_supported_language_variant(language)
    return None
