"""What an institution API token may do, in JupyterHub's ``resource:action`` style.

A ``:write`` scope does not imply ``:read``: a token gets exactly the scopes it lists.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

SCOPES: dict[str, object] = {
    "courses:read": _("Read courses"),
    "courses:write": _("Create, edit and archive courses; set their quota"),
    "roster:read": _("Read course rosters"),
    "roster:write": _("Replace course rosters"),
    "templates:read": _("Read templates"),
    "sessions:read": _("Read sessions and their progress"),
    "sessions:write": _("Launch and stop sessions on a student's behalf"),
    "usage:read": _("Read usage"),
    "webhooks:read": _("Read webhook subscriptions and their delivery log"),
    "webhooks:write": _("Create, change, pause and delete webhook subscriptions; rotate their secret; redeliver"),
}


def unknown_scopes(scopes) -> list[str]:
    return sorted(set(scopes) - set(SCOPES))
