"""What every page's header needs to know about the user."""

from __future__ import annotations

from functools import cache

from django.utils.functional import SimpleLazyObject

from labs.selectors.console import console_links


def console(request) -> dict:
    """``teaches`` and ``operates``: whether to show the links to the instructor and operator
    consoles (one query, made only when a page uses either)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"teaches": False, "operates": False}
    links = cache(lambda: console_links(user=user))
    return {
        "teaches": SimpleLazyObject(lambda: links().teaches),
        "operates": SimpleLazyObject(lambda: links().operates),
    }
