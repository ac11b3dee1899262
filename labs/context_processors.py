"""What every page's header needs to know about the user."""

from __future__ import annotations

from django.utils.functional import SimpleLazyObject

from labs.selectors.console import is_teacher
from labs.selectors.operations import operator_scope


def console(request) -> dict:
    """``teaches`` and ``operates``: whether to show the links to the instructor and operator
    consoles (each asked only when a page uses it)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"teaches": False, "operates": False}
    return {
        "teaches": SimpleLazyObject(lambda: is_teacher(user=user)),
        "operates": SimpleLazyObject(lambda: operator_scope(user=user) is not None),
    }
