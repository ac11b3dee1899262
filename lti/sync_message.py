"""What the instructor reads after "Sync roster": what the sync changed, with the names of the
first few members of each change, as the CSV import's result reports its rows."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext

from lti.services import SyncReport

# How many members of each change are named; the rest are counted.
NAMED = 3


def _names(names: list[str]) -> str:
    shown = pgettext("between the names of a list", ", ").join(names[:NAMED])
    more = len(names) - NAMED
    if more <= 0:
        return shown
    return ngettext("%(names)s and %(more)d more", "%(names)s and %(more)d more", more) % {"names": shown, "more": more}


def sync_message(report: SyncReport) -> str:
    """``report`` in the active language: each kind of change with its count and first names, or
    that nothing changed."""
    parts = []
    if report.joined:
        n = len(report.joined)
        parts.append(ngettext("%(n)d added (%(names)s)", "%(n)d added (%(names)s)", n) % {"n": n, "names": _names(report.joined)})
    if report.roles:
        n = len(report.roles)
        parts.append(
            ngettext("%(n)d role changed (%(names)s)", "%(n)d roles changed (%(names)s)", n)
            % {"n": n, "names": _names(report.roles)}
        )
    if report.updated:
        n = len(report.updated)
        parts.append(
            ngettext("%(n)d name or e-mail updated (%(names)s)", "%(n)d names or e-mails updated (%(names)s)", n)
            % {"n": n, "names": _names(report.updated)}
        )
    if report.left:
        n = len(report.left)
        parts.append(
            ngettext("%(n)d removed (%(names)s)", "%(n)d removed (%(names)s)", n) % {"n": n, "names": _names(report.left)}
        )
    if not parts:
        return _("Roster synced from the LMS: nothing changed.")
    return _("Roster synced from the LMS: %(changes)s.") % {"changes": pgettext("between the items of a list", "; ").join(parts)}


def refused_message(report: SyncReport) -> str:
    """The members whose new e-mail the sync did not take, and why; empty when there are none."""
    if not report.refused:
        return ""
    n = len(report.refused)
    return ngettext("%(n)d e-mail address not changed (%(names)s).", "%(n)d e-mail addresses not changed (%(names)s).", n) % {
        "n": n,
        "names": _names(report.refused),
    }
