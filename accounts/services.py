"""Writes to a user's own preferences."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import translation

from accounts.models import Preference


def supported_language(language: str | None) -> str:
    """The portal's code for ``language`` ("zh-Hans" → "zh-hans", "en-us" → "en").

    Raises ``ValueError`` for a language that is not in ``settings.LANGUAGES``.
    """
    try:
        # The codes of LANGUAGES are lower case; Django returns the variant as it was asked for.
        return translation.get_supported_language_variant(language or "").lower()
    except LookupError:
        raise ValueError(f"the portal does not offer the language {language!r} (settings.LANGUAGES)") from None


def preference_set_language(*, user: AbstractBaseUser, language: str) -> Preference:
    """Keep ``language`` as ``user``'s choice; returns their preference row (made on first choice).

    Raises ``ValueError`` for a language the portal does not offer; nothing is stored then.
    """
    code = supported_language(language)
    # update_or_create locks the row (or, on a first choice, retries a create that lost a race).
    preference, _created = Preference.objects.update_or_create(user=user, defaults={"language": code})
    return preference
