"""An API error's message is in one language: English by default, Chinese when the request's
Accept-Language asks for it, never the portal's English around DRF's Chinese (or the reverse)."""

from __future__ import annotations

import re

import pytest

from tests.api.conftest import TokenClient

CJK = re.compile(r"[\u4e00-\u9fff]")
CHINESE = {"Accept-Language": "zh-Hans"}


def errors(api: TokenClient, scopeless: TokenClient, course) -> list:
    """One request for each kind of error body the API answers with."""
    url = f"/api/v1/courses/{course.pk}/"
    return [
        ("POST", "/api/v1/courses/", {"code": "", "title": "x", "term": "y"}, {}, api),  # DRF's field message
        ("GET", "/api/v1/courses/?page_size=0", None, {}, api),  # the portal's field message
        ("PATCH", url, {"title": "R"}, {}, api),  # 428
        ("PATCH", url, {"title": "R"}, {"If-Match": '"stale"'}, api),  # 412
        ("GET", "/api/v1/courses/99999/", None, {}, api),  # 404
        ("GET", "/api/v1/no-such-resource/", None, {}, api),  # 404: no URL matches
        ("GET", "/api/v1/courses/", None, {}, scopeless),  # 403: a scope missing
        ("GET", "/api/v1/courses/", None, {"Authorization": "Bearer nope"}, api),  # 401
    ]


@pytest.fixture
def scopeless(world, make_token) -> TokenClient:
    return TokenClient(make_token(world["course"].institution, scopes=[]))


def messages(requests, headers: dict) -> list[tuple[int, str]]:
    answers = []
    for method, path, body, extra, client in requests:
        response = client.call(method, path, body, headers={**headers, **extra})
        assert response.status_code >= 400
        answers.append((response.status_code, response.json()["error"]["message"]))
    return answers


def test_errors_are_in_english_by_default(api, scopeless, world):
    for status, message in messages(errors(api, scopeless, world["course"]), {}):
        assert not CJK.search(message), (status, message)


def test_errors_are_all_chinese_when_the_request_asks_for_chinese(api, scopeless, world):
    requests = errors(api, scopeless, world["course"])
    english = dict(messages(requests, {}))
    for status, message in messages(requests, CHINESE):
        assert CJK.search(message), (status, message)
        assert message != english[status]
        # Not a word of the English sentence beside the Chinese, only names (fields, headers, scopes).
        words = set(re.findall(r"[A-Za-z_-]{3,}", message)) - {"code", "page_size", "If-Match", "ETag", "GET", "courses", "read"}
        assert not words, (status, message, words)


def test_an_address_no_url_matches_is_the_apis_error_under_api_and_the_portals_page_elsewhere(api, client):
    response = api.call("GET", "/api/v1/no-such-resource/", None)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"

    page = client.get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    # The slash is still appended before anything is called not found.
    assert client.get("/api/v1/courses").status_code == 301
