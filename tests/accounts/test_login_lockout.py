"""Login throttling (django-axes) over HTTP: after 5 failed logins an account is refused from that
address, with a page that says how long and whom to ask, until the wait is over or an operator
lifts the block."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.exceptions import AxesBackendRequestParameterRequired
from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.http import HttpRequest
from django.test import Client, override_settings
from django.utils import timezone

from tests.factories import PASSWORD, UserFactory

LOGIN = "/accounts/login/"
LOCKOUT_TEXT = "Too many failed attempts to log in"
HOME = "127.0.0.1"
ELSEWHERE = "192.0.2.7"


def attempt(username: str, password: str, *, address: str = HOME, **headers: str):
    return Client(REMOTE_ADDR=address, **headers).post(LOGIN, {"username": username, "password": password, "next": "/"})


def fail(username: str, times: int = 5, **kwargs) -> None:
    for _ in range(times):
        attempt(username, "wrong-password", **kwargs)


def logged_in(response) -> bool:
    return response.status_code == 302 and "_auth_user_id" in response.client.session


def locked_out(response) -> bool:
    return response.status_code == 429 and LOCKOUT_TEXT in response.content.decode()


@pytest.fixture
def ada(db):
    return UserFactory(username="ada")


def test_the_defaults_are_five_failures_and_fifteen_minutes_per_account_and_address():
    assert settings.AXES_FAILURE_LIMIT == 5
    assert settings.AXES_COOLOFF_TIME == timedelta(minutes=15)
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_four_wrong_passwords_then_the_right_one_log_in(ada):
    fail("ada", 4)
    assert logged_in(attempt("ada", PASSWORD))


def test_five_wrong_passwords_then_the_right_one_is_refused_with_the_lockout_page(ada):
    responses = [attempt("ada", "wrong-password") for _ in range(5)]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 429]
    assert "did not match" in responses[0].content.decode()

    response = attempt("ada", PASSWORD)
    assert locked_out(response)
    assert not logged_in(response)
    page = response.content.decode()
    assert "15 minutes" in page
    assert "administrators" in page
    assert response["Retry-After"] == "900"
    assert 'name="password"' in page  # still the login page, with its form


def test_the_lockout_page_keeps_a_local_next_and_drops_another_sites(ada):
    fail("ada")
    page = Client().post(LOGIN, {"username": "ada", "password": PASSWORD, "next": "/courses/"}).content.decode()
    assert 'name="next" value="/courses/"' in page
    page = Client().post(LOGIN, {"username": "ada", "password": PASSWORD, "next": "https://evil.example/"}).content.decode()
    assert 'name="next" value=""' in page


def test_the_lockout_page_is_in_the_readers_language(ada):
    fail("ada")
    response = attempt("ada", PASSWORD, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 429
    page = response.content.decode()
    assert '<html lang="zh-hans">' in page
    assert LOCKOUT_TEXT not in page
    assert "15 分钟内将拒绝登录" in page


def test_trying_again_while_locked_out_does_not_make_the_wait_longer(ada):
    fail("ada")
    locked_at = AccessAttempt.objects.get().attempt_time
    fail("ada", 3)
    assert AccessAttempt.objects.get().attempt_time == locked_at
    assert AccessAttempt.objects.get().failures_since_start == 5


def test_the_right_password_is_accepted_again_once_the_wait_is_over(ada):
    fail("ada")
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=15, seconds=1))
    assert logged_in(attempt("ada", PASSWORD))


def test_an_operator_lifts_the_block_with_axes_reset_username(ada, capsys):
    fail("ada")
    assert locked_out(attempt("ada", PASSWORD))
    call_command("axes_reset_username", "ada")
    assert "1 attempts removed" in capsys.readouterr().out
    assert logged_in(attempt("ada", PASSWORD))


def test_another_account_from_the_same_address_is_not_locked(ada):
    grace = UserFactory(username="grace")
    fail("ada")
    assert logged_in(attempt(grace.username, PASSWORD))


def test_the_same_account_from_another_address_is_not_locked(ada):
    fail("ada")
    assert logged_in(attempt("ada", PASSWORD, address=ELSEWHERE))
    assert locked_out(attempt("ada", PASSWORD))


def test_an_unknown_username_is_locked_out_like_a_real_one(db):
    """The lockout page does not tell which usernames exist."""
    responses = [attempt("nobody", "wrong-password") for _ in range(6)]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 429, 429]


def test_a_successful_login_forgets_the_earlier_failures(ada):
    fail("ada", 4)
    assert logged_in(attempt("ada", PASSWORD))
    fail("ada", 4)
    assert logged_in(attempt("ada", PASSWORD))


def test_a_forged_x_forwarded_for_does_not_change_the_address_counted(ada):
    for number in range(5):
        attempt("ada", "wrong-password", HTTP_X_FORWARDED_FOR=f"203.0.113.{number}")
    assert locked_out(attempt("ada", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.99"))
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {HOME}


@override_settings(TRUSTED_PROXY_COUNT=1)
def test_behind_one_trusted_proxy_the_address_it_saw_is_counted(ada):
    """The proxy appends the client's address; what the client wrote before it is not believed."""
    fail("ada", HTTP_X_FORWARDED_FOR="203.0.113.5")
    assert locked_out(attempt("ada", PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.5"))
    assert logged_in(attempt("ada", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.6"))
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.5"}


def test_the_admin_lists_access_attempts_and_deletes_one_to_lift_a_block(ada):
    fail("ada")
    operator = UserFactory(username="operator", is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(operator)
    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200
    assert "ada" in listing.content.decode()
    pk = AccessAttempt.objects.get().pk
    confirm = admin.post(f"/admin/axes/accessattempt/{pk}/delete/", {"post": "yes"})
    assert confirm.status_code == 302
    assert not AccessAttempt.objects.exists()
    assert logged_in(attempt("ada", PASSWORD))


def test_the_admin_login_is_locked_out_too(ada):
    fail("ada")
    response = Client().post("/admin/login/", {"username": "ada", "password": PASSWORD, "next": "/admin/"})
    assert locked_out(response)


def test_force_login_passes_by_the_lockout_and_the_test_clients_login_needs_a_request(ada):
    """For test writers: force_login never authenticates; axes refuses to judge a login without
    the request, so Django's Client.login works only when given one."""
    fail("ada")
    client = Client()
    client.force_login(ada)
    assert client.get("/").wsgi_request.user == ada
    with pytest.raises(AxesBackendRequestParameterRequired):
        Client().login(username="grace", password=PASSWORD)
    UserFactory(username="grace")
    assert Client().login(request=HttpRequest(), username="grace", password=PASSWORD)
