"""What a page says about sizes, shares and sessions, in the reader's language: one place for the
words the templates (``labs.templatetags``), the selectors' payloads and the websocket consumer
all show, so a page's first render and its live updates say the same thing.

A card's times change with the clock (time left, the wait in the queue), so the page's script
composes them again every 30 s. It composes them from the same phrases as ``card_text`` here,
which ``{% session_card_words %}`` puts into the page already translated for its reader: the
first render (Python) and every later one (``cardText`` in ``labs/static/labs/sessions.js``)
say the same thing in the same language.
"""

from __future__ import annotations

from typing import Any

from django.utils import formats, timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext, gettext_noop, ngettext

from labs.domain.lifecycle import session_limit_minutes


def gib_text(memory_mib: int | None) -> str:
    """``524288`` → "512 GiB", ``4608`` → "4.5 GiB", ``128`` → "0.125 GiB", in the active language's number format."""
    if memory_mib is None or memory_mib == "":
        return ""
    gib = int(memory_mib) / 1024
    places = 0 if gib == int(gib) else min(3, len(f"{gib:.3f}".rstrip("0").split(".")[1]))
    return gettext("%(amount)s GiB") % {"amount": formats.number_format(gib, places, use_l10n=True, force_grouping=True)}


PHRASES = {
    "started": gettext_noop("started %(time)s"),
    "stops": gettext_noop("stops at %(time)s"),
    "left": gettext_noop("%(duration)s left"),
    "minutes": gettext_noop("%(minutes)s min"),
    "hours": gettext_noop("%(hours)s h %(minutes)s min"),
    "under_a_minute": gettext_noop("less than a minute"),
    "queue_wait": gettext_noop("#%(position)s in %(course)s's queue, about %(wait)s"),
    "queue_soon": gettext_noop("#%(position)s in %(course)s's queue, next within a minute"),
    "queue": gettext_noop("#%(position)s in %(course)s's queue, waiting"),
}
PIECES = ("queue", "started", "left", "stops")


def share_text(core_percent: int, memory_mib: int, cards: int = 1) -> str:
    """An NPU share in words: "5 % of one NPU's AI Core guaranteed, 4 GiB memory"; on whole cards
    (``cards`` > 1, ``memory_mib`` each card's): "2 whole cards, 128 GiB memory in all"; a share
    with no floor (core 0: a best-effort instance) says it is best effort."""
    if cards > 1:
        return gettext("%(cards)s whole cards, %(memory)s memory in all") % {
            "cards": cards,
            "memory": gib_text(memory_mib * cards),
        }
    if core_percent == 0:
        return gettext("best effort: no AI Core guaranteed (it uses what the card has idle), %(memory)s memory") % {
            "memory": gib_text(memory_mib)
        }
    return gettext("%(core)s %% of one NPU's AI Core guaranteed, %(memory)s memory") % {
        "core": core_percent,
        "memory": gib_text(memory_mib),
    }


def selftest_text(visible_mib: int | None, over_cap: bool) -> str:
    """The lab's isolation self-test in words; empty before the lab has reported one."""
    if visible_mib is None:
        return ""
    if over_cap:
        return gettext(
            "Isolation self-test: this lab sees %(memory)s of NPU memory, more than its share; operators are told."
        ) % {"memory": gib_text(visible_mib)}
    return gettext("Isolation self-test: this lab sees %(memory)s of NPU memory, within its share.") % {
        "memory": gib_text(visible_mib)
    }


def duration_text(seconds: float) -> str:
    """``59`` → "less than a minute", ``180`` → "3 min", ``7980`` → "2 h 13 min" (whole minutes, rounded down)."""
    if seconds < 60:
        return gettext(PHRASES["under_a_minute"])
    hours, minutes = divmod(int(seconds // 60), 60)
    if hours:
        return gettext(PHRASES["hours"]) % {"hours": hours, "minutes": minutes}
    return gettext(PHRASES["minutes"]) % {"minutes": minutes}


def card_text(card: dict[str, Any], piece: str, *, now: float) -> str:
    """One timed line of a card (``PIECES``) from its payload at ``now`` (seconds); "" when it does not apply."""
    if piece == "queue":
        if card.get("queue_position") is None:
            return ""
        values = {"position": card["queue_position"], "course": card["course"]}
        if card.get("wait_seconds") is None:
            return gettext(PHRASES["queue"]) % values
        if card["wait_seconds"] < 60:
            return gettext(PHRASES["queue_soon"]) % values
        return gettext(PHRASES["queue_wait"]) % {**values, "wait": duration_text(card["wait_seconds"])}
    if piece == "started":
        return gettext(PHRASES["started"]) % {"time": _clock(card["started_at"])} if card.get("started_at") else ""
    if piece in ("left", "stops"):
        stops_at = parse_datetime(card["stops_at"]) if card.get("stops_at") else None
        if stops_at is None:
            return ""
        if piece == "stops":
            return gettext(PHRASES["stops"]) % {"time": _clock(card["stops_at"])}
        return gettext(PHRASES["left"]) % {"duration": duration_text(max(0.0, stops_at.timestamp() - now))}
    raise ValueError(f"unknown card piece {piece!r}; known: {PIECES}")


def card_words() -> dict[str, str]:
    """The phrases the page's script composes card lines from, in the active language."""
    return {key: gettext(phrase) for key, phrase in PHRASES.items()}


def _clock(iso: str) -> str:
    return timezone.localtime(parse_datetime(iso)).strftime("%H:%M")


def template_limit_text(template, quota) -> str:
    """The launch page's words for a template whose own maximum length is shorter than its
    course's: the limit the controller enforces then (``session_limit_minutes``). Empty when the
    course's applies (it is said once for the course) or the course has no quota (in a page,
    ``course.quota`` of a course without one reads as "")."""
    if not quota:
        return ""
    minutes = session_limit_minutes(template.max_lifetime_minutes, quota.max_session_minutes)
    if minutes is None or minutes >= quota.max_session_minutes:
        return ""
    return ngettext(
        "Up to %(minutes)s minute a session: this lab's limit, shorter than the course's.",
        "Up to %(minutes)s minutes a session: this lab's limit, shorter than the course's.",
        minutes,
    ) % {"minutes": minutes}


def budget_text(budget) -> str:
    """A student's weekly budget in words: what is used of each limit the course sets, and the share."""
    parts = []
    if budget.core_percent_hours is not None:
        parts.append(
            gettext("%(used)s of %(limit)s AI-Core-%% × hours")
            % {"used": formats.number_format(budget.used.core_percent_hours, 1), "limit": budget.core_percent_hours}
        )
    if budget.gib_hours is not None:
        parts.append(
            gettext("%(used)s of %(limit)s GiB × hours")
            % {"used": formats.number_format(budget.used.gib_hours, 1), "limit": budget.gib_hours}
        )
    return gettext("%(parts)s used (%(percent)s %%)") % {"parts": " · ".join(parts), "percent": budget.percent}


def extend_label(minutes: int) -> str:
    """The session card's extend button, in the active language."""
    return ngettext("Add %(minutes)s minute", "Add %(minutes)s minutes", minutes) % {"minutes": minutes}
