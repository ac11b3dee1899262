"""Scopes per view and method: a view says ``required_scopes = {"GET": "courses:read", ...}``."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import exceptions, permissions

from api.authentication import ApiClient


class HasScope(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        if not isinstance(request.user, ApiClient):
            raise exceptions.NotAuthenticated()
        required = getattr(view, "required_scopes", {}).get(request.method)
        if required is None:
            return request.method == "OPTIONS"
        if required not in request.user.scopes:
            raise exceptions.PermissionDenied(_("This token lacks the scope %(scope)s.") % {"scope": required})
        return True
