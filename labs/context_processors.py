"""What every page's header needs to know about the user."""

from __future__ import annotations

from django.utils.functional import SimpleLazyObject

from labs.selectors.console import is_teacher


def console(request) -> dict:
    """``teaches``: whether to show the link to the instructor console (asked only when a page uses it)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"teaches": False}
    return {"teaches": SimpleLazyObject(lambda: is_teacher(user=user))}
