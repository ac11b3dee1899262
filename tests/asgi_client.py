"""A browser's requests through ``portal.asgi.application``, the application Daphne serves, in
this process: Django's ``ASGIRequest``, the portal's ASGI handler and every middleware, with
cookies kept and CSRF enforced as for a real browser (Django's test ``Client`` goes through
neither: it builds a ``WSGIRequest`` and skips the CSRF check).

The views run in the handler's threads, each with its own database connection: the data a test
makes must be committed first (``transactional_db`` / ``django_db(transaction=True)``).
"""

from __future__ import annotations

import asyncio
import re
from html import unescape

import httpx
from django.conf import settings
from django.test import Client

BASE_URL = "http://testserver"
COOKIE_DOMAIN = "testserver.local"  # what the cookie jar files a dotless host's cookies under
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class AsgiClient:
    """Requests to the portal's ASGI application as one visitor: ``user`` signed in (``None``:
    anonymous), pages asked for in ``language`` (the language cookie, as the language menu sets it).
    Redirects are not followed."""

    def __init__(self, *, user=None, language: str | None = None) -> None:
        from portal.asgi import application

        self.transport = httpx.ASGITransport(app=application, client=("127.0.0.1", 50000))
        self.cookies = httpx.Cookies()
        if language:
            self.cookies.set(settings.LANGUAGE_COOKIE_NAME, language, domain=COOKIE_DOMAIN)
        if user is not None:
            client = Client()
            client.force_login(user)  # a session in the portal's session store, as a login makes
            session = client.cookies[settings.SESSION_COOKIE_NAME].value
            self.cookies.set(settings.SESSION_COOKIE_NAME, session, domain=COOKIE_DOMAIN)

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        return asyncio.run(self.arequest(method, path, **kwargs))

    async def arequest(self, method: str, path: str, *, timeout: float = 60, **kwargs) -> httpx.Response:
        async with httpx.AsyncClient(transport=self.transport, base_url=BASE_URL, cookies=self.cookies) as http:
            response = await asyncio.wait_for(http.request(method, path, **kwargs), timeout)
            self.cookies = http.cookies
        return response

    def get(self, path: str, **kwargs) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, data: dict | None = None, **kwargs) -> httpx.Response:
        """A form's POST: ``data`` with the CSRF token a page gave this visitor (the cookie's,
        fetched from the login page when no page has set it yet)."""
        return asyncio.run(self.apost(path, data, **kwargs))

    async def apost(self, path: str, data: dict | None = None, **kwargs) -> httpx.Response:
        return await self.arequest("POST", path, data={"csrfmiddlewaretoken": await self.acsrf_token(), **(data or {})}, **kwargs)

    async def acsrf_token(self) -> str:
        token = self.cookies.get(settings.CSRF_COOKIE_NAME)
        if token is None:
            page = await self.arequest("GET", "/accounts/login/")
            token = unescape(CSRF_INPUT.search(page.text).group(1))
        return token
