"""The signed-in user of a request, read with one written-out statement.

Every request of a signed-in user reads its user row (``request.user``). Django's
``ModelBackend.get_user`` composes ``User.objects.get(pk=...)`` for it, and building that query
and turning its row into a model cost about three times running it (docs/framework-overrides.md,
"The user's read"). ``AuthenticationMiddleware`` here is Django's with ``request.user`` from
:func:`get_user`: Django's ``django.contrib.auth.get_user`` (the session's user and backend, the
session hash checked against the password's, the fallback keys, a flush when it fails) with the
row read written out when the session's backend reads users as ``ModelBackend`` does. Any other
backend is asked as Django asks it. ``request.auser`` (async callers) is Django's own.
"""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    _get_user_session_key,
    get_user_model,
    load_backend,
)
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.middleware import AuthenticationMiddleware as DjangoAuthenticationMiddleware
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import connections, router
from django.utils.crypto import constant_time_compare
from django.utils.functional import SimpleLazyObject

from labs.selectors.rows import Conversion, column, conversion, converted, table


class AuthenticationMiddleware(DjangoAuthenticationMiddleware):
    """Django's, with ``request.user`` from :func:`get_user` (cached on the request, as Django's)."""

    def process_request(self, request):
        super().process_request(request)
        request.user = SimpleLazyObject(lambda: _cached_user(request))


def _cached_user(request):
    if not hasattr(request, "_cached_user"):
        request._cached_user = get_user(request)
    return request._cached_user


def get_user(request):
    """``django.contrib.auth.get_user`` (Django 5.2.19), the user read by :func:`user_read` when the
    session's backend reads users as ``ModelBackend`` does."""
    user = None
    try:
        user_id = _get_user_session_key(request)
        backend_path = request.session[BACKEND_SESSION_KEY]
    except KeyError:
        pass
    else:
        if backend_path in settings.AUTHENTICATION_BACKENDS:
            backend = load_backend(backend_path)
            if type(backend).get_user is ModelBackend.get_user:
                user = user_read(backend, user_id)
            else:
                user = backend.get_user(user_id)
            # Verify the session
            if hasattr(user, "get_session_auth_hash"):
                session_hash = request.session.get(HASH_SESSION_KEY)
                if not session_hash:
                    session_hash_verified = False
                else:
                    session_auth_hash = user.get_session_auth_hash()
                    session_hash_verified = constant_time_compare(session_hash, session_auth_hash)
                if not session_hash_verified:
                    # If the current secret does not verify the session, try with the fallback
                    # secrets and stop when a matching one is found.
                    if session_hash and any(
                        constant_time_compare(session_hash, fallback_auth_hash)
                        for fallback_auth_hash in user.get_session_auth_fallback_hash()
                    ):
                        request.session.cycle_key()
                        request.session[HASH_SESSION_KEY] = session_auth_hash
                    else:
                        request.session.flush()
                        user = None

    return user or AnonymousUser()


def user_read(backend: ModelBackend, user_id):
    """``backend.get_user(user_id)`` as ``ModelBackend`` answers it: the user, or ``None`` when there
    is none with that key or it may not sign in (``user_can_authenticate``: inactive). A key
    that is not one (a session whose data was altered) finds no user, where the ORM's ``get``
    raised."""
    model = get_user_model()
    alias = router.db_for_read(model)
    connection = connections[alias]
    pk = model._meta.pk
    try:
        key = pk.get_db_prep_value(pk.to_python(user_id), connection)
    except (ValidationError, TypeError, ValueError):
        return None
    sql, attnames, plan = _read(model, alias)
    with connection.cursor() as cursor:
        cursor.execute(sql, [key])
        rows = cursor.fetchall()
    if not rows:
        return None
    (values,) = converted(rows, plan)
    user = model.from_db(alias, attnames, values)
    return user if backend.user_can_authenticate(user) else None


@cache
def _read(model, alias: str) -> tuple[str, list[str], Conversion]:
    """The user's row by primary key, every column (as ``get`` reads it), its attribute names and
    the conversion of its values. Parameter: the key."""
    fields = model._meta.concrete_fields
    col = lambda name: column(model, name, using=alias)  # noqa: E731
    columns = ", ".join(col(f.name) for f in fields)
    sql = f"SELECT {columns} FROM {table(model, using=alias)} WHERE {col(model._meta.pk.name)} = %s"
    return sql, [f.attname for f in fields], conversion(fields)
