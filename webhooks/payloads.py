"""What a delivery's body says (docs/lms.md "Webhooks"): ``{"type", "timestamp", "data"}``, as Standard
Webhooks recommends. Built once, when the event is stored: a retry sends the same bytes' content."""

from __future__ import annotations

from datetime import datetime

from labs.domain.reasons import Reason
from labs.models import LabSession, UsageRecord

# The state a session event reports: the one it entered, not where the session is by now.
STATE_OF = {"session.queued": "queued", "session.running": "running"}


def _time(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _course(course) -> dict:
    return {"id": course.pk, "code": course.code, "term": course.term}


def event_body(kind: str, at: datetime, data: dict) -> dict:
    return {"type": kind, "timestamp": _time(at), "data": data}


def session_data(kind: str, session: LabSession) -> dict:
    data = {
        "session": str(session.pk),
        "state": STATE_OF.get(kind, session.state),
        "course": _course(session.course),
        "student": session.student.get_username(),
        "template": session.template.slug,
        "template_name": session.template.name,  # as the portal's pages name it
        "launched_at": _time(session.created_at),
        "running_at": _time(session.running_at),
    }
    if kind == "session.ended":
        reason = Reason.from_json({"code": session.reason_code, "params": session.reason_params}) if session.reason_code else None
        data.update(
            ended_at=_time(session.ended_at),
            end_state=session.state,
            reason_code=session.reason_code,
            reason=str(reason) if reason is not None else "",
        )
    return data


def usage_data(record: UsageRecord, session: LabSession) -> dict:
    return {
        "session": str(record.session_id),
        "course": _course(session.course),
        "student": session.student.get_username(),
        "template": session.template.slug,
        "template_name": session.template.name,  # as the portal's pages name it
        "started_at": _time(record.started_at),
        "ended_at": _time(record.ended_at),
        "core_percent": record.core_percent,
        "memory_mib": record.memory_mib,
        "core_percent_seconds": record.core_percent_seconds,
        "memory_mib_seconds": record.memory_mib_seconds,
        "borrowed": record.borrowed,
    }
