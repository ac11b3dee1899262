"""Every API request reads its token with one written-out statement (``api.authentication.token_read``):
it answers what the ORM's ``select_related("institution")...first()`` answers, the institution with it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from api.authentication import token_read
from api.models import ApiToken
from api.scopes import SCOPES
from api.services import token_create
from api.tokens import token_digest, token_prefix
from labs.models import Institution


def values(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.mark.django_db
def test_the_token_read_answers_as_the_orm(django_assert_num_queries):
    institution = Institution.objects.create(name="Read University", slug="read-u")
    Institution.objects.create(name="Other University", slug="other-u")  # the join must pick the token's
    token, secret = token_create(
        institution=institution, name="lms", scopes=sorted(SCOPES)[:2], expires_at=timezone.now() + timedelta(days=3)
    )
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now() - timedelta(minutes=5))
    prefix, digest = token_prefix(secret), token_digest(secret)
    expected = ApiToken.objects.select_related("institution").get(prefix=prefix, secret_sha256=digest)
    with django_assert_num_queries(1):
        got = token_read(prefix, digest)
        assert got.institution.name == "Read University"  # read with the token: no query of its own
    assert values(got) == values(expected)
    assert values(got.institution) == values(expected.institution)
    assert got.scopes == sorted(SCOPES)[:2] and got.is_usable()
    assert not got._state.adding and got._state.db == "default"


@pytest.mark.django_db
def test_a_wrong_digest_or_prefix_finds_no_token():
    institution = Institution.objects.create(name="Read University", slug="read-u")
    _token, secret = token_create(institution=institution, name="lms", scopes=sorted(SCOPES))
    prefix, digest = token_prefix(secret), token_digest(secret)
    assert token_read(prefix, token_digest(secret + "x")) is None
    assert token_read(prefix[:-1] + ("a" if prefix[-1] != "a" else "b"), digest) is None
    assert token_read(prefix, digest) is not None
