"""The error pages (400, 403, 404, 500 and the CSRF failure) through the ASGI application, as
Daphne serves them with DEBUG off: the portal's own dress (its style sheet and header) in the
reader's language, not Django's bare English pages. The 500 page renders with the database out
of reach, and 400, 500 and the CSRF failure without the request (Django renders them so)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.urls import include, path

from tests.asgi_client import AsgiClient
from tests.factories import UserFactory

STYLE_SHEET = "/static/labs/portal.css"


def count_users(request):
    """A page that reads the database: in the test below, the database is out of reach."""
    return get_user_model().objects.count()


urlpatterns = [path("reads-the-database/", count_users), path("", include("portal.urls"))]


def assert_portal_page(response, status: int, language: str, *texts: str) -> None:
    assert response.status_code == status, response.text[:300]
    page = response.text
    assert f'<html lang="{language}">' in page
    assert STYLE_SHEET in page
    assert 'class="brand"' in page
    assert 'id="error-page"' in page
    for text in texts:
        assert text in page, text


@pytest.mark.parametrize(
    ("language", "texts"),
    [("en", ["Page not found", "There is no page at this address"]), ("zh-hans", ["找不到页面", "此地址没有页面"])],
)
def test_a_missing_page_is_the_portals_404_in_the_readers_language(transactional_db, language, texts):
    response = AsgiClient(language=language).get("/no-such-page/")
    assert_portal_page(response, 404, language, *texts)
    assert 'name="language"' in response.text  # the language menu, as on every page


@pytest.mark.parametrize(
    ("language", "texts"),
    [
        ("en", ["Not allowed", "You may not create courses; ask your institution&#x27;s operator."]),
        ("zh-hans", ["无权访问", "您无权创建课程"]),
    ],
)
def test_a_refused_page_is_the_portals_403_with_the_reason(transactional_db, language, texts):
    response = AsgiClient(user=UserFactory(), language=language).get("/teach/courses/new/")
    assert_portal_page(response, 403, language, *texts)
    assert "Log out" in response.text or "退出" in response.text  # the signed-in header


@pytest.mark.parametrize(("language", "texts"), [("en", ["Bad request"]), ("zh-hans", ["请求无效"])])
def test_a_bad_host_is_the_portals_400(transactional_db, language, texts):
    response = AsgiClient(language=language).get("/", headers={"Host": "evil.example"})
    assert_portal_page(response, 400, language, *texts)


@pytest.mark.parametrize(
    ("language", "texts"),
    [("en", ["The form has expired", "nothing was changed"]), ("zh-hans", ["表单已过期", "未做任何更改"])],
)
def test_a_form_without_its_csrf_token_is_the_portals_403(transactional_db, language, texts):
    visitor = AsgiClient(language=language)
    response = visitor.request("POST", "/accounts/login/", data={"username": "ada", "password": "x"})
    assert_portal_page(response, 403, language, *texts)


@override_settings(ROOT_URLCONF=__name__)
@pytest.mark.parametrize(
    ("language", "texts"),
    [("en", ["Something went wrong", "try again in a few minutes"]), ("zh-hans", ["出错了", "请过几分钟再试"])],
)
def test_with_the_database_out_of_reach_a_page_is_the_portals_500(language, texts):
    """No ``db`` fixture: pytest-django refuses every database access, as a database that is down
    would; the page that reads it fails, and the 500 page itself reads nothing."""
    response = AsgiClient(language=language).get("/reads-the-database/")
    assert_portal_page(response, 500, language, *texts)
    assert 'name="language"' not in response.text  # no menu: it needs the request


@pytest.mark.parametrize(
    ("language", "texts"),
    [("en", ["Too many failed attempts to log in", "15 minutes"]), ("zh-hans", ["15 分钟内将拒绝登录"])],
)
def test_the_lockout_page_is_the_portals_login_page_in_the_readers_language(transactional_db, language, texts):
    UserFactory(username="ada")
    visitor = AsgiClient(language=language)
    for _ in range(5):
        visitor.post("/accounts/login/", {"username": "ada", "password": "wrong-password"})
    response = visitor.post("/accounts/login/", {"username": "ada", "password": "wrong-password"})
    assert response.status_code == 429
    assert f'<html lang="{language}">' in response.text
    assert STYLE_SHEET in response.text
    assert 'id="lockout"' in response.text
    for text in texts:
        assert text in response.text, text
