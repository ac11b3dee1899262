"""What a page says about sizes, shares and sessions, in the reader's language: one place for the
words the templates (``labs.templatetags``), the selectors' payloads and the websocket consumer
all show, so a page's first render and its live updates say the same thing.

A session card's timed lines (queue place and wait, started, time left, stops at) are composed
here once (``card_line``), into the first render and into every payload the page hears, in its
reader's language; they leave one slot for the clock, which the page's script
(``labs/static/labs/sessions.js``) fills every 30 s: a time in the reader's time zone, or a
duration from the phrases ``{% session_card_words %}`` puts into the page.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils import formats, timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext, gettext_noop, ngettext, pgettext

from labs.domain.lifecycle import session_limit_minutes


def label_separator() -> str:
    """What goes between a label and its value: ": " in English, a full-width "：" in Chinese
    (templates write ``{% translate ": " context "between a label and its value" %}``)."""
    return pgettext("between a label and its value", ": ")


def gib_text(memory_mib: int | None) -> str:
    """``524288`` → "512 GiB", ``4608`` → "4.5 GiB", ``128`` → "0.125 GiB", in the active language's number format."""
    if memory_mib is None or memory_mib == "":
        return ""
    gib = int(memory_mib) / 1024
    places = 0 if gib == int(gib) else min(3, len(f"{gib:.3f}".rstrip("0").split(".")[1]))
    return gettext("%(amount)s GiB") % {"amount": formats.number_format(gib, places, use_l10n=True, force_grouping=True)}


def cores_text(millicores: int | None) -> str:
    """CPU in cores, as people count it: ``190000`` → "190 cores", ``2500`` → "2.5 cores",
    ``1000`` → "1 core" (millicores, Kubernetes' unit, stay in the forms that ask for them)."""
    if millicores is None or millicores == "":
        return ""
    cores = int(millicores) / 1000
    places = 0 if cores == int(cores) else min(3, len(f"{cores:.3f}".rstrip("0").split(".")[1]))
    amount = formats.number_format(cores, places, use_l10n=True, force_grouping=True)
    # The plural follows the figure: "1 core", "0.5 cores", "2 cores".
    return ngettext("%(amount)s core", "%(amount)s cores", 1 if cores == 1 else 2) % {"amount": amount}


def usage_text(amount: float) -> str:
    """An amount of NPU time (AI-Core-% x hours, GiB x hours) for a usage table: two decimals, so
    a row of a few minutes reads "0.05", not "0.0", and the rows add up to the chart's total; an
    amount under 0.005 reads "< 0.01" rather than "0.00", which would say nothing was used."""
    if amount <= 0:
        return formats.number_format(0, 0, use_l10n=True)
    if amount < 0.005:
        return "< " + formats.number_format(0.01, 2, use_l10n=True)
    # number_format cuts the decimals off; rounded first, the rows agree with the chart's (rounded) days.
    return formats.number_format(round(amount, 2), 2, use_l10n=True, force_grouping=True)


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


# The space between a figure and its unit ("3.75 GiB", "5 %"), which a narrow card must not break at.
FIGURE_UNIT_SPACE = re.compile(r"(?<=\d) (?=GiB|%)")


def units_kept_together(text: str) -> str:
    """``text`` with a no-break space between each figure and its unit, so a line never ends
    between them (in both languages: the translations write the same units)."""
    return FIGURE_UNIT_SPACE.sub("\u00a0", text)


def share_text(core_percent: int, memory_mib: int, cards: int = 1) -> str:
    """An NPU share in words: "5 % of one NPU's AI Core guaranteed, 4 GiB memory"; on whole cards
    (``cards`` > 1, ``memory_mib`` each card's): "2 whole cards, 128 GiB memory in all"; a share
    with no floor (core 0: a best-effort instance) says it is best effort. A figure and its unit
    are joined by a no-break space (``units_kept_together``)."""
    return units_kept_together(_share_words(core_percent, memory_mib, cards))


def _share_words(core_percent: int, memory_mib: int, cards: int) -> str:
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


def smaller_offer_text(offer: dict[str, Any] | None) -> str:
    """The smaller lab a queued session is offered (its ``smaller_offer``) in words: "A 10 % / 4 GiB
    lab can start now instead" (AI Core and NPU memory in all); empty without one."""
    if not offer:
        return ""
    cards = offer.get("cards", 1)
    return units_kept_together(
        gettext("A %(core)s %% / %(memory)s lab can start now instead")
        % {"core": offer["core_percent"] * cards, "memory": gib_text(offer["memory_mib"] * cards)}
    )


def selftest_text(visible_mib: int | None, over_cap: bool) -> str:
    """The lab's isolation self-test in words; empty before the lab has reported one."""
    return units_kept_together(_selftest_words(visible_mib, over_cap))


def _selftest_words(visible_mib: int | None, over_cap: bool) -> str:
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


# The slot a timed line leaves for the clock: filled by whoever shows the line, at that moment.
TIME_SLOT = "%(time)s"
DURATION_SLOT = "%(duration)s"


def card_line(card: dict[str, Any], piece: str) -> dict[str, Any] | None:
    """One timed line of a card (``PIECES``), composed from its payload in the active language;
    ``None`` when it does not apply.

    ``text`` is the line but for one slot that moves with the clock, which whoever shows it fills
    (:func:`line_text` here; the page's script, ``labs/static/labs/sessions.js``, every 30 s):
    ``%(time)s``, the clock time ``at`` (ISO 8601) in the reader's time zone; or ``%(duration)s``,
    the time left until ``until`` (ISO 8601) or, counted from when the line was read, of
    ``seconds``, with ``soon`` said instead once less than a minute is left. A line without
    ``at``, ``until`` or ``seconds`` is final.
    """
    if piece == "queue":
        if card.get("queue_position") is None:
            return None
        values = {"position": card["queue_position"], "course": card["course"]}
        if card.get("wait_seconds") is None:
            return {"text": gettext(PHRASES["queue"]) % values}
        return {
            "text": gettext(PHRASES["queue_wait"]) % {**values, "wait": DURATION_SLOT},
            "seconds": card["wait_seconds"],
            "soon": gettext(PHRASES["queue_soon"]) % values,
        }
    if piece == "started":
        if not card.get("started_at"):
            return None
        return {"text": gettext(PHRASES["started"]) % {"time": TIME_SLOT}, "at": card["started_at"]}
    if piece in ("left", "stops"):
        if not card.get("stops_at") or parse_datetime(card["stops_at"]) is None:
            return None
        if piece == "stops":
            return {"text": gettext(PHRASES["stops"]) % {"time": TIME_SLOT}, "at": card["stops_at"]}
        return {"text": gettext(PHRASES["left"]) % {"duration": DURATION_SLOT}, "until": card["stops_at"]}
    raise ValueError(f"unknown card piece {piece!r}; known: {PIECES}")


def card_lines(card: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Every timed line of a card (:func:`card_line`), by piece: what its payload carries to the page."""
    return {piece: card_line(card, piece) for piece in PIECES}


def line_text(line: dict[str, Any] | None, *, now: float) -> str:
    """A timed line (:func:`card_line`), read at ``now`` (seconds since the epoch) just after it was
    composed, as the page's first render shows it; "" for none."""
    if line is None:
        return ""
    if "at" in line:
        return line["text"].replace(TIME_SLOT, _clock(line["at"]), 1)
    if "until" in line:
        left = max(0.0, parse_datetime(line["until"]).timestamp() - now)
    elif "seconds" in line:
        left = line["seconds"]
    else:
        return line["text"]
    if "soon" in line and left < 60:
        return line["soon"]
    return line["text"].replace(DURATION_SLOT, duration_text(left), 1)


def card_text(card: dict[str, Any], piece: str, *, now: float) -> str:
    """One timed line of a card (``PIECES``) from its payload at ``now`` (seconds); "" when it does not apply."""
    return line_text(card_line(card, piece), now=now)


def card_words() -> dict[str, str]:
    """The phrases of a card's lines in the active language: the page's script fills a line's
    duration slot with the duration ones (``under_a_minute``, ``minutes``, ``hours``)."""
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


def nodes_text(*, total: int, drained: int, unready: int, unanswering: int) -> str:
    """The cluster's nodes in one line: how many are drained, not ready for their device profile
    and not answering (each node counted once, in that order), or that every node takes labs."""
    if not (drained or unready or unanswering):
        return ngettext("%(total)s node, taking labs.", "%(total)s nodes, all taking labs.", total) % {"total": total}
    return ngettext(
        "%(drained)s of %(total)s node drained, %(unready)s not ready, %(unanswering)s not answering: "
        "they take no new labs.",
        "%(drained)s of %(total)s nodes drained, %(unready)s not ready, %(unanswering)s not answering: "
        "they take no new labs.",
        total,
    ) % {"drained": drained, "total": total, "unready": unready, "unanswering": unanswering}


def cards_text(*, total: int, full: int, not_taking: int) -> str:
    """The cluster's cards in one line: how many are full and how many take no new session
    (unhealthy, marked unhealthy, or on a node that takes none)."""
    return ngettext(
        "%(total)s card: %(full)s full, %(not_taking)s not taking sessions.",
        "%(total)s cards: %(full)s full, %(not_taking)s not taking sessions.",
        total,
    ) % {"total": total, "full": full, "not_taking": not_taking}


def nothing_stranded_text(*, every_node_takes_labs: bool) -> str:
    """What the cluster page says when no card's free capacity is stranded: all of it, or only on
    the nodes that take labs (a drained or unready node's cards are not counted as stranded)."""
    if every_node_takes_labs:
        return gettext("Nothing is stranded: every card with free capacity can still take an instance.")
    return gettext(
        "Nothing is stranded on the nodes that take labs; the cards of drained, unready or unanswering nodes "
        "take no new labs."
    )
