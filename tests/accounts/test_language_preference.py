"""The language a signed-in user picks is kept with their account and comes back at every login."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import Client

from accounts.models import Preference
from accounts.selectors import preferred_language
from accounts.services import preference_set_language
from labs.consumers import reader_language
from tests.factories import PASSWORD, UserFactory

SETLANG = "/i18n/setlang/"
LOGIN = "/accounts/login/"
COOKIE = settings.LANGUAGE_COOKIE_NAME


def page_language(client: Client, url: str = "/") -> str:
    response = client.get(url)
    assert response.status_code == 200
    return re.search(r'<html lang="([^"]+)"', response.content.decode())[1]


def log_in(client: Client, user):
    response = client.post(LOGIN, {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302, "the login failed"
    return response


def test_a_signed_in_user_who_picks_a_language_keeps_it_with_their_account(db):
    user = UserFactory()
    client = Client()
    client.force_login(user)
    response = client.post(SETLANG, {"language": "zh-hans", "next": "/"})
    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.cookies[COOKIE].value == "zh-hans"
    assert Preference.objects.get(user=user).language == "zh-hans"
    assert page_language(client) == "zh-hans"

    client.post(SETLANG, {"language": "en", "next": "/"})
    assert Preference.objects.get(user=user).language == "en"


def test_logging_in_on_another_device_brings_the_choice_back(db):
    user = UserFactory()
    preference_set_language(user=user, language="zh-hans")
    # Another browser that asks for English and once chose English itself.
    elsewhere = Client(HTTP_ACCEPT_LANGUAGE="en-GB,en;q=0.9")
    elsewhere.cookies[COOKIE] = "en"
    assert page_language(elsewhere, LOGIN) == "en"

    response = log_in(elsewhere, user)
    assert response.cookies[COOKIE].value == "zh-hans"
    assert response.cookies[COOKIE]["max-age"] == settings.LANGUAGE_COOKIE_AGE
    html = elsewhere.get("/").content.decode()
    assert '<html lang="zh-hans">' in html
    assert "退出登录" in html
    # The websocket reads the same cookie, so live updates come in that language too.
    assert reader_language({"cookies": {COOKIE: elsewhere.cookies[COOKIE].value}}) == "zh-hans"


def test_a_user_who_never_chose_keeps_the_language_of_their_browser(db):
    user = UserFactory()
    client = Client(HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9")
    response = log_in(client, user)
    assert COOKIE not in response.cookies
    assert page_language(client) == "zh-hans"


def test_an_anonymous_visitor_gets_the_language_their_browser_asks_for(db):
    chinese = Client(HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.5")
    assert page_language(chinese, LOGIN) == "zh-hans"
    assert "用户名" in chinese.get(LOGIN).content.decode()
    assert page_language(Client(HTTP_ACCEPT_LANGUAGE="fr-FR"), LOGIN) == "en"
    assert page_language(Client(), LOGIN) == "en"


def test_an_anonymous_pick_sets_the_cookie_and_stores_nothing(db, client):
    client.post(SETLANG, {"language": "zh-hans", "next": LOGIN})
    assert client.cookies[COOKIE].value == "zh-hans"
    assert page_language(client, LOGIN) == "zh-hans"
    assert not Preference.objects.exists()


def test_a_language_the_portal_does_not_offer_is_not_kept(db):
    user = UserFactory()
    client = Client()
    client.force_login(user)
    client.post(SETLANG, {"language": "fr", "next": "/"})
    assert not Preference.objects.exists()
    with pytest.raises(ValueError, match="does not offer the language 'fr'"):
        preference_set_language(user=user, language="fr")
    assert not Preference.objects.exists()


def test_a_language_is_stored_by_the_portals_own_code(db):
    user = UserFactory()
    assert preference_set_language(user=user, language="zh-Hans").language == "zh-hans"
    assert preference_set_language(user=user, language="zh-cn").language == "zh-hans"
    assert preference_set_language(user=user, language="en-us").language == "en"
    assert Preference.objects.filter(user=user).count() == 1


def test_a_stored_language_the_portal_no_longer_offers_is_ignored_at_login(db):
    user = UserFactory()
    Preference.objects.create(user=user, language="fr")
    assert preferred_language(user=user) is None
    response = log_in(Client(), user)
    assert COOKIE not in response.cookies
