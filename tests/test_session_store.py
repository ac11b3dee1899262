"""portal.sessions: Django's database sessions read with a written-out statement, same behaviour."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.backends.db import SessionStore as DjangoStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.sessions import SessionStore

pytestmark = pytest.mark.django_db


def test_the_portal_uses_it(settings):
    assert settings.SESSION_ENGINE == "portal.sessions"


def test_a_session_saved_by_django_s_store_loads_in_one_query():
    made = DjangoStore()
    made["_auth_user_id"] = "7"
    made["next"] = "/courses/3/"
    made.save()
    with CaptureQueriesContext(connection) as queries:
        loaded = SessionStore(made.session_key).load()
    assert loaded == {"_auth_user_id": "7", "next": "/courses/3/"}
    assert len(queries.captured_queries) == 1


def test_an_expired_session_loads_empty_and_its_key_is_forgotten():
    store = SessionStore()
    store["_auth_user_id"] = "7"
    store.save()
    Session.objects.filter(session_key=store.session_key).update(expire_date=timezone.now() - timedelta(seconds=1))
    again = SessionStore(store.session_key)
    assert again.load() == {}
    assert again.session_key is None  # as Django's store: saving now makes a new key, never reuses the old one


def test_an_unknown_key_loads_empty_and_a_tampered_row_is_not_trusted():
    assert SessionStore("x" * 32).load() == {}
    store = SessionStore()
    store["_auth_user_id"] = "7"
    store.save()
    Session.objects.filter(session_key=store.session_key).update(session_data="not-signed")
    assert SessionStore(store.session_key).load() == {}


def test_a_signed_in_page_and_a_logout_work_through_it(client, django_user_model):
    user = django_user_model.objects.create_user("store-user", password="x")
    client.force_login(user)
    assert client.get("/").wsgi_request.user == user
    key = client.cookies["sessionid"].value
    client.post("/accounts/logout/")
    assert not Session.objects.filter(session_key=key).exists()
    assert client.get("/").status_code == 302  # to the login page
