"""HTTPS, HSTS, the reverse proxy and login throttling from the environment: safe defaults with
``HTTPS`` on, every value settable, a malformed one refused, and ``check --deploy`` silent."""

from __future__ import annotations

import secrets

import pytest

from tests.test_settings import loaded, refused, run_settings

PRINT_SECURITY = """
import json
import django
django.setup()
from django.conf import settings
names = [
    "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD",
    "SECURE_PROXY_SSL_HEADER", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "TRUSTED_PROXY_COUNT",
    "AXES_FAILURE_LIMIT", "AXES_LOCKOUT_PARAMETERS", "SILENCED_SYSTEM_CHECKS",
]
values = {name: getattr(settings, name) for name in names}
values["AXES_COOLOFF_SECONDS"] = settings.AXES_COOLOFF_TIME.total_seconds()
print(json.dumps(values))
"""

PRODUCTION = {"DEBUG": "0", "HTTPS": "1", "ALLOWED_HOSTS": "portal.example.edu"}


def security(tmp_path, **env: str | None) -> dict:
    return loaded(run_settings(tmp_path, PRINT_SECURITY, **env))


def test_without_https_nothing_redirects_and_no_hsts_is_sent(tmp_path):
    values = security(tmp_path)
    assert values["SECURE_SSL_REDIRECT"] is False
    assert values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_SECURE"] is False
    assert values["SECURE_PROXY_SSL_HEADER"] is None
    assert values["TRUSTED_PROXY_COUNT"] == 0


def test_https_turns_on_the_redirect_a_years_hsts_with_subdomains_and_secure_cookies(tmp_path):
    values = security(tmp_path, HTTPS="1")
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_HSTS_SECONDS"] == 31536000
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True
    assert values["SECURE_HSTS_PRELOAD"] is False
    assert values["SESSION_COOKIE_SECURE"] is values["CSRF_COOKIE_SECURE"] is True


def test_each_https_setting_can_be_set_on_its_own(tmp_path):
    values = security(
        tmp_path,
        HTTPS="1",
        SECURE_SSL_REDIRECT="0",
        SECURE_HSTS_SECONDS="3600",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="no",
        SECURE_HSTS_PRELOAD="yes",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto",
        TRUSTED_PROXY_COUNT="2",
    )
    assert values["SECURE_SSL_REDIRECT"] is False
    assert values["SECURE_HSTS_SECONDS"] == 3600
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is False
    assert values["SECURE_HSTS_PRELOAD"] is True
    assert values["SILENCED_SYSTEM_CHECKS"] == []  # preload on: nothing left to silence
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["TRUSTED_PROXY_COUNT"] == 2


def test_login_throttling_defaults_and_overrides(tmp_path):
    default = security(tmp_path)
    assert (default["AXES_FAILURE_LIMIT"], default["AXES_COOLOFF_SECONDS"]) == (5, 900)
    assert default["AXES_LOCKOUT_PARAMETERS"] == [["username", "ip_address"]]
    values = security(
        tmp_path, LOGIN_FAILURE_LIMIT="10", LOGIN_LOCKOUT_MINUTES="60", LOGIN_LOCKOUT_PARAMETERS="username+ip_address, ip_address"
    )
    assert (values["AXES_FAILURE_LIMIT"], values["AXES_COOLOFF_SECONDS"]) == (10, 3600)
    assert values["AXES_LOCKOUT_PARAMETERS"] == [["username", "ip_address"], "ip_address"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LOGIN_FAILURE_LIMIT": "five"}, "LOGIN_FAILURE_LIMIT='five' is not an integer"),
        ({"LOGIN_FAILURE_LIMIT": "0"}, "LOGIN_FAILURE_LIMIT=0 is out of range"),
        ({"LOGIN_LOCKOUT_MINUTES": "-5"}, "LOGIN_LOCKOUT_MINUTES=-5 is out of range"),
        ({"LOGIN_LOCKOUT_PARAMETERS": "username+ip"}, "LOGIN_LOCKOUT_PARAMETERS='username+ip': each group is"),
        ({"LOGIN_LOCKOUT_PARAMETERS": "username,"}, "LOGIN_LOCKOUT_PARAMETERS='username,': each group is"),
        ({"TRUSTED_PROXY_COUNT": "all"}, "TRUSTED_PROXY_COUNT='all' is not an integer"),
        ({"TRUSTED_PROXY_COUNT": "-1"}, "TRUSTED_PROXY_COUNT=-1 is out of range"),
        ({"SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https"}, "SECURE_PROXY_SSL_HEADER='X-Forwarded-Proto: https' is not"),
        ({"SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS='a year' is not an integer"),
        ({"SECURE_SSL_REDIRECT": "sometimes"}, "SECURE_SSL_REDIRECT='sometimes' is not a boolean"),
    ],
)
def test_a_malformed_security_setting_stops_start_up_naming_it(tmp_path, env, message):
    assert message in refused(run_settings(tmp_path, PRINT_SECURITY, **env))


CHECK_DEPLOY = """
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "check", "--deploy"])
"""


def check_deploy(tmp_path, **env: str) -> str:
    """What ``manage.py check --deploy`` prints, in a new interpreter (settings are read at import)."""
    result = run_settings(tmp_path, CHECK_DEPLOY, SECRET_KEY=secrets.token_urlsafe(50), **env)
    return result.stdout + result.stderr


def test_check_deploy_with_https_finds_nothing(tmp_path):
    output = check_deploy(tmp_path, **PRODUCTION)
    assert "System check identified no issues" in output, output
    assert "WARNINGS" not in output and "ERRORS" not in output


def test_check_deploy_still_warns_when_https_is_turned_down(tmp_path):
    """The silence above is the settings' doing, not a check turned off."""
    output = check_deploy(tmp_path, **PRODUCTION, SECURE_SSL_REDIRECT="0", SECURE_HSTS_SECONDS="0")
    assert "security.W004" in output and "security.W008" in output
