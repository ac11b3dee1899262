"""portal.auth: the signed-in user read with a written-out statement, as Django's ModelBackend reads it.

In tests/views so that it runs on SQLite (make test-sqlite) as well as PostgreSQL.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from portal.auth import AuthenticationMiddleware, user_read
from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db

FIELDS = (
    "id",
    "password",
    "last_login",
    "is_superuser",
    "username",
    "first_name",
    "last_name",
    "email",
    "is_staff",
    "is_active",
    "date_joined",
)


def test_the_portal_uses_it(settings):
    assert "portal.auth.AuthenticationMiddleware" in settings.MIDDLEWARE
    assert "django.contrib.auth.middleware.AuthenticationMiddleware" not in settings.MIDDLEWARE


def test_it_reads_what_the_model_backend_reads_in_one_query(django_user_model):
    made = django_user_model.objects.create_user("reader", email="r@example.edu", password="x", first_name="Ada")
    django_user_model.objects.filter(pk=made.pk).update(last_login=made.date_joined)
    with CaptureQueriesContext(connection) as queries:
        read = user_read(ModelBackend(), str(made.pk))  # the session keeps the key as text
    assert len(queries.captured_queries) == 1
    django_s = ModelBackend().get_user(made.pk)
    assert {f: getattr(read, f) for f in FIELDS} == {f: getattr(django_s, f) for f in FIELDS}
    assert read._state.adding is False and read._state.db == "default"
    assert read.get_session_auth_hash() == django_s.get_session_auth_hash()


def test_no_user_an_inactive_one_or_a_key_that_is_not_one_reads_as_none(django_user_model):
    inactive = django_user_model.objects.create_user("gone", password="x", is_active=False)
    assert user_read(ModelBackend(), inactive.pk) is None  # as ModelBackend: may not sign in
    assert ModelBackend().get_user(inactive.pk) is None
    assert user_read(ModelBackend(), inactive.pk + 1000) is None
    assert user_read(ModelBackend(), "not-a-key") is None  # the ORM's get raised ValueError here


def test_a_page_knows_its_user_and_a_changed_password_signs_every_session_out(client, django_user_model):
    user = django_user_model.objects.create_user("signed-in", password="old-password")
    client.force_login(user)
    assert client.get("/").wsgi_request.user == user
    user.set_password("new-password")
    user.save()  # the session's hash no longer matches the password's
    answer = client.get("/")
    assert answer.status_code == 302
    assert answer.wsgi_request.user.is_anonymous


class _OwnBackend(ModelBackend):
    """A backend with its own way of reading users: asked as Django asks it."""

    def get_user(self, user_id):
        user = super().get_user(user_id)
        if user is not None:
            user.read_by = "own"
        return user


def test_a_backend_with_its_own_read_is_asked_for_the_user(settings, django_user_model):
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, f"{__name__}._OwnBackend"]
    user = django_user_model.objects.create_user("own", password="x")
    request = _request_signed_in(user, backend=f"{__name__}._OwnBackend")
    assert request.user == user and request.user.read_by == "own"
    request = _request_signed_in(user, backend="django.contrib.auth.backends.ModelBackend")
    assert request.user == user and not hasattr(request.user, "read_by")


def test_a_session_of_a_backend_no_longer_configured_is_anonymous(django_user_model):
    user = django_user_model.objects.create_user("stale", password="x")
    request = _request_signed_in(user, backend=f"{__name__}._OwnBackend")  # not in AUTHENTICATION_BACKENDS
    assert request.user.is_anonymous and isinstance(request.user._wrapped, AnonymousUser)


@pytest.mark.django_db(transaction=True)
def test_a_signed_in_page_through_the_asgi_application_shows_its_user(django_user_model):
    user = django_user_model.objects.create_user("asgi-user", password="x")
    page = AsgiClient(user=user).get("/")
    assert page.status_code == 200
    assert "asgi-user" in page.text


def _request_signed_in(user, *, backend: str):
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session[BACKEND_SESSION_KEY] = backend
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    request = RequestFactory().get("/")
    request.session = session
    AuthenticationMiddleware(lambda r: None).process_request(request)
    return request
