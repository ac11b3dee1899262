"""An invitation link (what the roster import gives an account it made without a password) sets
the account's first password once, within its time; a used, expired or altered link is refused
with a page that says so, and changes nothing. Through the ASGI application, as Daphne serves it."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from labs.selectors.invitations import roster_invitations
from labs.services.roster import roster_apply
from tests.asgi_client import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)

NEW_PASSWORD = "lantern-orbit-42"


@pytest.fixture
def invited(world):
    """A student account the roster import made (no password), and its invitation link."""
    course = world["course"]
    plan = roster_apply(course=course, text="username,email\nnew-li,li@example.edu\n")
    (invitation,) = roster_invitations(course=course, user_ids=[row.user_id for row in plan.rows])
    return get_user_model().objects.get(username="new-li"), invitation.path


def set_password(client: AsgiClient, link: str, password: str = NEW_PASSWORD):
    opened = client.get(link)
    assert opened.status_code == 302, opened.text  # the token leaves the address for the session
    form_page = opened.headers["location"]
    assert form_page.endswith("/set-password/") and link.split("/")[-2] not in form_page
    page = client.get(form_page)
    assert page.status_code == 200 and 'name="new_password1"' in page.text
    return client.post(form_page, {"new_password1": password, "new_password2": password})


def log_in(password: str = NEW_PASSWORD) -> int:
    return AsgiClient().post("/accounts/login/", {"username": "new-li", "password": password}).status_code


def refused(response) -> bool:
    return response.status_code == 400 and "This invitation link cannot be used" in response.text


def test_an_invitation_sets_a_password_once_and_then_the_student_logs_in(invited, caplog):
    user, link = invited
    assert log_in("") == 200  # no password: the login page again

    with caplog.at_level(logging.DEBUG):
        done = set_password(AsgiClient(), link)
    token = link.rstrip("/").split("/")[-1]
    # The portal logs no token (httpx's lines are this test's client, not the portal).
    assert not [r for r in caplog.records if not r.name.startswith("httpx") and token in r.getMessage()]

    assert done.status_code == 302 and done.headers["location"] == "/accounts/login/"
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD)
    assert log_in() == 302
    again = AsgiClient().get(link)
    assert refused(again)
    user.refresh_from_db()
    assert user.check_password(NEW_PASSWORD)


def test_the_password_page_says_what_is_wrong_with_a_password_and_sets_nothing(invited):
    user, link = invited
    answer = set_password(AsgiClient(), link, "12345678")
    assert answer.status_code == 200 and "This password is entirely numeric." in answer.text
    user.refresh_from_db()
    assert not user.has_usable_password()


def test_an_expired_invitation_is_refused(invited):
    user, link = invited
    later = timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT + 60)
    with time_machine.travel(later, tick=False):
        assert refused(AsgiClient().get(link))
    user.refresh_from_db()
    assert not user.has_usable_password()
    with time_machine.travel(later - timedelta(minutes=5), tick=False):  # within its time, it works
        assert set_password(AsgiClient(), link).status_code == 302


@pytest.mark.parametrize(
    "tamper",
    [
        lambda uid, token: (uid, token[:-1] + ("a" if token[-1] != "a" else "b")),  # the signature changed
        lambda uid, token: (urlsafe_base64_encode(force_bytes(int(urlsafe_base64_decode(uid)) - 1)), token),  # another id
        lambda uid, token: (uid, "1-2"),  # not a token
    ],
)
def test_an_altered_link_is_refused_with_a_clear_page_and_changes_nothing(invited, tamper):
    user, link = invited
    uid, token = link.rstrip("/").split("/")[-2:]
    uid, token = tamper(uid, token)
    response = AsgiClient().get(f"/accounts/invitation/{uid}/{token}/")
    assert refused(response)
    assert 'name="new_password1"' not in response.text
    user.refresh_from_db()
    assert not user.has_usable_password()


def test_an_account_with_a_password_gets_no_link_and_its_token_is_refused(invited, world):
    user, link = invited
    user.set_password("chosen-elsewhere-7")
    user.save(update_fields=["password"])
    assert roster_invitations(course=world["course"], user_ids=[user.pk]) == []
    assert refused(AsgiClient().get(link))


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_refusal_page_is_in_the_readers_language(invited, language):
    response = AsgiClient(language=language).get("/accounts/invitation/MQ/1-2/")
    assert response.status_code == 400 and f'<html lang="{language}"' in response.text
