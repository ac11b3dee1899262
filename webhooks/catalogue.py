"""The events an LMS may subscribe to (docs/lms.md "Webhooks")."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

EVENT_TYPES: dict[str, object] = {
    "session.queued": _("A session was launched and waits for capacity"),
    "session.running": _("A session is running and can be opened"),
    "session.ended": _("A session ended (stopped or failed, with the reason)"),
    "usage.recorded": _("A usage record was written for an ended session"),
}
# The event types as choices (the API's schema names this set once: ENUM_NAME_OVERRIDES).
EVENT_TYPE_CHOICES = list(EVENT_TYPES)
