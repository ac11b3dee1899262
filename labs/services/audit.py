"""The audit log: every change made through a console or the API, who made it, before → after.

Written in the same transaction as the change it records, so a change that rolls back leaves
no entry and an entry never lacks its change.
"""

from __future__ import annotations

from typing import Any

from labs.models import AuditEvent


def audit_record(
    *, by, action: str, target: str, institution=None, before: dict | None = None, after: dict | None = None
) -> AuditEvent:
    """Record ``action`` on ``target`` by ``by`` (a user, or ``None`` for the system)."""
    return AuditEvent.objects.create(
        actor=by if getattr(by, "pk", None) else None,
        actor_name=by.get_username() if by is not None else "system",
        institution=institution,
        action=action,
        target=str(target)[:300],
        before=_plain(before or {}),
        after=_plain(after or {}),
    )


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe values: dates and decimals as text."""
    return {k: v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else str(v) for k, v in values.items()}
