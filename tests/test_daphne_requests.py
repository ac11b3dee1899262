"""Daphne hands a posted form to Django unparsed (portal/daphne_requests.py): Django parses it once."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)

# A multipart body with no parts: Twisted's parse of it fails.
BROKEN = {"content-type": "multipart/form-data; boundary=xyz"}


def test_a_form_twisted_could_not_parse_reaches_django(portal_server):
    # Twisted answered such a body 400 (no page) and closed the connection before Django saw it;
    # Django answers it as any POST without a CSRF token: 403, with the portal's error page.
    answer = httpx.post(portal_server + "/accounts/login/", content=b"not a multipart body", headers=BROKEN, timeout=30)
    assert answer.status_code == 403
    assert "Back to the portal" in answer.text


def test_a_posted_form_still_reaches_the_view(portal_server, django_user_model):
    from tests.served import signed_in

    user = django_user_model.objects.create_user("someone", password="x")
    with signed_in(portal_server, user) as client:
        # The form is read by Django (the view answers the missing course and template in words).
        answer = client.post("/sessions/launch/", data={"course": "", "template": ""})
    assert answer.status_code == 400
    assert answer.json()["error"]
