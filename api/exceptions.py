"""One body for every error: ``{"error": {"code": ..., "message": ..., "fields": {...}}}``.

``code`` is stable and meant for programs; ``message`` is for people, in one language a
response: English, or Chinese when the request's Accept-Language asks for it (the portal's
messages and DRF's own are both translated, so none is left in the other language); ``fields``
maps a body or query field to its problems, only for invalid input.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import exceptions, status
from rest_framework.views import exception_handler as drf_exception_handler


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = gettext_lazy("The resource changed since you read it: GET it again and send its new ETag in If-Match.")
    default_code = "precondition_failed"


class PreconditionRequired(exceptions.APIException):
    status_code = status.HTTP_428_PRECONDITION_REQUIRED
    default_detail = gettext_lazy(
        "Send the ETag of the resource you read in If-Match, so a change made meanwhile is not overwritten."
    )
    default_code = "precondition_required"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = gettext_lazy("The request conflicts with the resource's state.")
    default_code = "conflict"


class Refused(exceptions.APIException):
    """A write the portal refuses for a reason its services give (e.g. a launch that is not allowed)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "refused"


def _fields(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as ``{"members.3.role": ["..."]}``: one level, every value a list of messages."""
    if isinstance(detail, dict):
        items = detail.items()
    elif isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        items = ((str(i), item) for i, item in enumerate(detail))
    else:
        messages = [str(m) for m in (detail if isinstance(detail, list) else [detail])]
        return {prefix or "non_field_errors": messages} if messages else {}
    fields: dict[str, list[str]] = {}
    for key, value in items:
        fields.update(_fields(value, f"{prefix}.{key}" if prefix else str(key)))
    return fields


def error_body(code: str, message: str, fields: dict | None = None) -> dict:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a 500: Django's handler logs it and answers
    if isinstance(exc, exceptions.ValidationError):
        fields = _fields(exc.detail)
        name, messages = next(iter(fields.items()), ("", [_("Invalid input.")]))
        message = _("Invalid input: %(field)s: %(problem)s") % {"field": name, "problem": messages[0]} if name else messages[0]
        response.data = error_body("invalid", message, fields)
    else:
        code = getattr(exc, "default_code", "error")
        if isinstance(exc, exceptions.APIException):
            codes = exc.get_codes()
            code = codes if isinstance(codes, str) else code
        elif response.status_code == 404:
            code = "not_found"
        elif response.status_code == 403:
            code = "permission_denied"
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
        response.data = error_body(code, str(detail))
    return response
