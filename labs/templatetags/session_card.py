"""The words of a student's session card, in the active language: ``{% load session_card %}``.

The words themselves are composed in ``labs.presentation``; these tags put them into a page.
"""

from __future__ import annotations

import html
import json
import time
import uuid
from functools import lru_cache
from typing import Any

from django import template
from django.conf import settings
from django.template.loader import get_template
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils import timezone
from django.utils.html import format_html, json_script
from django.utils.safestring import mark_safe
from django.utils.translation import get_language

from labs.domain.states import TERMINAL
from labs.presentation import budget_text, card_words, line_text, share_text, template_limit_text

register = template.Library()


@register.simple_tag(name="card_text")
def card_text_tag(card: dict[str, Any] | None, piece: str) -> str:
    """A timed line of the card's payload as it reads now (the first render)."""
    return line_text(card["lines"][piece], now=time.time()) if card else ""


@register.simple_tag(name="card_line")
def card_line_tag(card: dict[str, Any] | None, piece: str) -> str:
    """`` data-line="…"``: the timed line of the card's payload (``labs.presentation.card_line``),
    which the page's script shows as the clock moves; nothing where the line does not apply."""
    line = card["lines"][piece] if card else None
    return format_html(' data-line="{}"', json.dumps(line)) if line else ""


# The attributes the page's script (``labs/static/labs/sessions.js``) finds and orders a card or
# a row by, from its payload, with what a blank ``<template>`` (no payload) gets; the times and
# the queue place are there for a reader of the page (the script shows each piece's ``data-line``).
DATA_ATTRIBUTES = (
    ("data-session-id", "id", ""),
    ("data-version", "version", 0),
    ("data-read-at-ms", "read_at_ms", 0),
    ("data-state", "state", ""),
    ("data-course-code", "course", ""),
    ("data-started-at", "started_at", ""),
    ("data-stops-at", "stops_at", ""),
    ("data-queue-position", "queue_position", None),
    ("data-wait-seconds", "wait_seconds", None),
)


@register.simple_tag(name="session_data")
def session_data_tag(card: dict[str, Any] | None) -> str:
    """`` data-session-id="…" data-version="…" …`` of a card or a row (``DATA_ATTRIBUTES``): a false
    value shows the blank's value, except where that is ``None``, where only a missing one does (0 stays)."""
    card = card or {}
    parts = []
    for attribute, key, blank in DATA_ATTRIBUTES:
        value = card.get(key)
        if blank is None:
            value = "" if value is None else value
        elif not value:
            value = blank
        # html.escape is what django.utils.html.escape does, without its lazy-string checks: this
        # runs nine times a row of the course page.
        parts.append(f' {attribute}="{html.escape(str(value))}"')
    return mark_safe("".join(parts))


# A session's URLs (``<uuid:session_id>``) are reversed once per URL name with this id in its
# place, then the session's id is put there: Django's ``reverse`` costs 30–60 µs a call, a
# student's card has four of them and their page up to seven cards.
PLACEHOLDER = uuid.UUID(int=0)


@lru_cache(maxsize=256)  # bounded: the script prefix can come from a request header (Daphne-Root-Path)
def _reversed_with_placeholder(name: str, script_prefix: str, urlconf: str) -> str:
    return reverse(name, urlconf=urlconf, args=[PLACEHOLDER])


@register.simple_tag(name="session_url")
def session_url_tag(name: str, session_id: uuid.UUID | str) -> str:
    """``{% url name session_id %}`` for a URL whose one argument is a session's id: the same path."""
    path = _reversed_with_placeholder(name, get_script_prefix(), get_urlconf() or settings.ROOT_URLCONF)
    return path.replace(str(PLACEHOLDER), str(uuid.UUID(str(session_id))), 1)


# The blank card the page's script fills for a new session (``<template id="session-card">``) is
# the same on every dashboard of a language but for the page's CSRF token: it is rendered once per
# language with a stand-in token (letters and digits, as a real one), which each page's own token
# replaces. It cost each dashboard as much as a session's card (about 0.5 ms).
CARD = "labs/_session_card.html"
STAND_IN_TOKEN = "standin" * 9 + "0"  # 64 characters, as a masked token
_blank_cards: dict[str, str] = {}


def _page_token(context) -> tuple[str, bool]:
    """The page's CSRF token ("" for none), and whether a card kept with the stand-in may take it:
    a real token (letters and digits), and not in DEBUG (an edited template shows at once)."""
    token = context.get("csrf_token")
    token = str(token) if token else ""
    return token, not settings.DEBUG and token.isalnum() and token != "NOTPROVIDED"


@register.simple_tag(takes_context=True)
def blank_session_card(context) -> str:
    """``{% include "labs/_session_card.html" with s=None %}``, rendered once per language."""
    token, keep = _page_token(context)
    if not keep:
        return mark_safe(get_template(CARD).render({"s": None, "csrf_token": token or None}))
    language = get_language()
    card = _blank_cards.get(language)
    if card is None:
        card = get_template(CARD).render({"s": None, "csrf_token": STAND_IN_TOKEN})
        if len(_blank_cards) < len(settings.LANGUAGES) + 1:
            _blank_cards[language] = card
    return mark_safe(card.replace(STAND_IN_TOKEN, token))


# A card no clock changes (an ended session's: its times are clock times, nothing counts down) is
# the same on every page load of its reader's language and time zone, but for the page's CSRF
# token and when its session was read (``data-read-at-ms``): it is rendered once per payload with
# stand-ins for both, which each page's own values replace. A student's dashboard shows up to
# five ended sessions (``RECENT_ENDED``); each card cost it about 0.45 ms to render.
READ_AT_STAND_IN = "readatstandin"
SETTLED_CARDS = 1024  # cards kept per web process (a payload and its card: about 5 KiB each)


@register.simple_tag(takes_context=True)
def session_card(context, session) -> str:
    """``{% include "labs/_session_card.html" with s=session %}``; an ended session's card from the
    cards rendered before (``_settled_card``) when nothing in it moves with the clock."""
    token, keep = _page_token(context)
    card = session.card
    if not keep or not _settled(session.state, card):
        return mark_safe(get_template(CARD).render({"s": session, "csrf_token": token or None}))
    key = json.dumps({**card, "read_at_ms": None}, separators=(",", ":"))  # in the payload's order, as drawn
    html_text = _settled_card(
        key, get_language(), timezone.get_current_timezone_name(), get_script_prefix(), get_urlconf() or settings.ROOT_URLCONF
    )
    read_at = html.escape(str(card.get("read_at_ms") or 0))
    return mark_safe(html_text.replace(STAND_IN_TOKEN, token).replace(READ_AT_STAND_IN, read_at, 1))


def _settled(state: str, card: dict[str, Any]) -> bool:
    """Whether ``card`` reads the same whenever it is drawn: its session ended, and no line of
    it counts down or up (``until``, ``seconds``: ``labs.presentation.card_line``)."""
    return state in TERMINAL and not any(
        line is not None and ("until" in line or "seconds" in line) for line in card["lines"].values()
    )


@lru_cache(maxsize=SETTLED_CARDS)
def _settled_card(card_json: str, language: str | None, zone: str, script_prefix: str, urlconf: str) -> str:
    """The card of ``card_json`` (a payload without its read time), with the stand-ins; the active
    language, time zone, script prefix and URLconf (the arguments) are what it was drawn in."""
    card = {**json.loads(card_json), "read_at_ms": READ_AT_STAND_IN}
    return get_template(CARD).render({"s": {"card": card}, "csrf_token": STAND_IN_TOKEN})  # s.card is all it reads


@register.simple_tag(name="share_text")
def share_text_tag(core_percent: int, memory_mib: int, cards: int = 1) -> str:
    return share_text(core_percent, memory_mib, cards)


@register.simple_tag
def session_card_words() -> str:
    return json_script(card_words(), "session-card-words")


@register.simple_tag
def shares_enforced() -> bool:
    return settings.LAB_SHARES_ENFORCED


@register.simple_tag(name="template_limit_text")
def template_limit_text_tag(template, quota) -> str:
    return template_limit_text(template, quota)


@register.simple_tag(name="budget_text")
def budget_text_tag(budget) -> str:
    return budget_text(budget)
