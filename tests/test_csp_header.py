"""portal.csp_header: the header a response gets is django-csp's own, built once when the response adds nothing."""

from __future__ import annotations

import pytest
from csp.constants import HEADER, HEADER_REPORT_ONLY, NONCE, NONE, SELF
from csp.exceptions import CSPNonceError
from csp.middleware import CSPMiddleware as LibraryCSPMiddleware
from django.http import HttpResponse
from django.test import RequestFactory

from portal.csp_header import CSPMiddleware
from tests.asgi_client import AsgiClient

ENFORCED = {"DIRECTIVES": {"default-src": [SELF], "img-src": [SELF, "data:"], "frame-ancestors": [NONE]}}
REPORT_ONLY = {"DIRECTIVES": {"default-src": [SELF], "report-uri": "/csp-report/"}}


def directives(value: str | None) -> set[str] | None:
    """A header's directives, in any order (django-csp builds them from a set)."""
    return None if value is None else {d.strip() for d in value.split(";")}


def headers(middleware_class, path="/", status=200, nonce=False, **response_attrs):
    """The two headers (or None) the middleware gives a response made by a view that sets ``response_attrs``."""
    request = RequestFactory().get(path)

    def view(request):
        response = HttpResponse("<p>page</p>", status=status)
        if nonce:
            str(request.csp_nonce)  # a template that asks for the nonce
        for name, value in response_attrs.items():
            setattr(response, name, value)
        return response

    middleware = middleware_class(view)
    response = middleware(request)
    return directives(response.get(HEADER)), directives(response.get(HEADER_REPORT_ONLY)), request


CASES = {
    "a page": {},
    "a view's update": {"_csp_update": {"img-src": ["https://example.edu"]}},
    "a view's replace": {"_csp_replace": {"frame-ancestors": ["https://lms.example.edu"]}},
    "a view's own config": {"_csp_config": {"default-src": [NONE]}},
    "a view's report-only update": {"_csp_update_ro": {"img-src": ["https://example.edu"]}},
    "exempt": {"_csp_exempt": True},
    "exempt from report-only": {"_csp_exempt_ro": True},
}


@pytest.mark.parametrize("report_only", [None, REPORT_ONLY], ids=["enforced only", "and report-only"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_response_gets_the_header_django_csp_gives_it(settings, case, report_only):
    settings.CONTENT_SECURITY_POLICY = ENFORCED
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = report_only
    ours = headers(CSPMiddleware, **CASES[case])[:2]
    assert ours == headers(LibraryCSPMiddleware, **CASES[case])[:2]
    if case == "a page":
        assert ours[0] and "frame-ancestors 'none'" in ours[0]
        assert (ours[1] is not None) == (report_only is not None)


def test_a_page_that_asks_for_a_nonce_gets_it_in_its_header(settings):
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": [SELF], "script-src": [SELF, NONCE]}}
    enforced, _, request = headers(CSPMiddleware, nonce=True)
    assert f"script-src 'self' 'nonce-{request._csp_nonce}'" in enforced
    assert headers(CSPMiddleware)[0] == {"default-src 'self'", "script-src 'self'"}  # a page without one


def test_a_nonce_asked_for_after_the_header_is_an_error(settings):
    _, _, request = headers(CSPMiddleware)
    with pytest.raises(CSPNonceError):
        str(request.csp_nonce)


def test_excluded_prefixes_and_debug_pages_get_no_header(settings):
    settings.CONTENT_SECURITY_POLICY = ENFORCED | {"EXCLUDE_URL_PREFIXES": ["/raw/"]}
    assert headers(CSPMiddleware, path="/raw/file")[0] is None
    assert headers(CSPMiddleware, path="/page/")[0] is not None
    settings.DEBUG = True
    for status in (404, 500):
        assert headers(CSPMiddleware, status=status)[0] is None
        assert headers(LibraryCSPMiddleware, status=status)[0] is None
    assert headers(CSPMiddleware, status=403)[0] is not None


def test_a_replaced_setting_is_built_again(settings):
    middleware = CSPMiddleware(lambda request: HttpResponse())
    settings.CONTENT_SECURITY_POLICY = ENFORCED
    first = middleware(RequestFactory().get("/"))[HEADER]
    assert middleware(RequestFactory().get("/"))[HEADER] == first  # built once, the same string
    settings.CONTENT_SECURITY_POLICY = {"DIRECTIVES": {"default-src": [NONE]}}
    assert middleware(RequestFactory().get("/"))[HEADER] == "default-src 'none'"
    settings.CONTENT_SECURITY_POLICY = None
    assert HEADER not in middleware(RequestFactory().get("/"))


@pytest.mark.django_db
def test_the_portal_sends_its_policy_through_it(settings):
    assert "portal.csp_header.CSPMiddleware" in settings.MIDDLEWARE
    assert "csp.middleware.CSPMiddleware" not in settings.MIDDLEWARE
    response = AsgiClient().get("/accounts/login/")
    assert response.status_code == 200
    policy = directives(response.headers[HEADER])
    assert {"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} <= policy
