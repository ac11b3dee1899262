"""Fixtures for the API: the ``world`` course, tokens of its institution and of another one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from api.scopes import SCOPES
from api.services import token_create
from labs.models import Institution


class TokenClient(Client):
    """Django's test client sending a bearer token and JSON bodies."""

    def __init__(self, token: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.token = token

    def _headers(self, headers):
        headers = dict(headers or {})
        if self.token:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        return headers

    def call(self, method: str, path: str, body=None, headers=None, **kwargs):
        send = getattr(self, method.lower())
        if body is not None:
            kwargs.update(data=body, content_type="application/json")
        return send(path, headers=self._headers(headers), **kwargs)


@pytest.fixture
def make_token(db):
    def make(institution=None, scopes=None, **kwargs) -> str:
        institution = institution or Institution.objects.get(slug="uni-test")
        _token, secret = token_create(
            institution=institution, name=kwargs.pop("name", "lms"), scopes=list(SCOPES) if scopes is None else scopes, **kwargs
        )
        return secret

    return make


@pytest.fixture
def api(world, make_token) -> TokenClient:
    """A client with a token of the world's institution holding every scope."""
    return TokenClient(make_token(world["course"].institution))


@pytest.fixture
def elsewhere(db) -> Institution:
    return Institution.objects.create(name="Elsewhere University", slug="elsewhere")


def expired_token(make_token, institution) -> str:
    return make_token(institution, expires_at=timezone.now() - timedelta(seconds=1))
