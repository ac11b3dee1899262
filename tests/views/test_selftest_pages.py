"""The isolation self-test on the student's session card and the operator's card page, in both languages."""

from __future__ import annotations

import pytest

from labs.models import AuditEvent, Card, LabSession
from labs.services.selftest import selftest_record
from tests.views import test_ops
from tests.views.test_ops import VISITORS, client_for

people = test_ops.people
running = test_ops.running


def report(session, visible_mib):
    LabSession.objects.filter(pk=session.pk).update(state="running")
    selftest_record(session_id=str(session.pk), secret=session.secret, visible_mib=visible_mib)


def get(client, url, language="en"):
    client.post("/i18n/setlang/", {"language": language, "next": url})
    return client.get(url).content.decode()


@pytest.mark.parametrize(
    ("language", "within", "over"),
    [
        ("en", "sees 8\u00a0GiB of NPU memory, within its share", "sees 24\u00a0GiB of NPU memory, more than its share"),
        ("zh-hans", "可见 8\u00a0GiB NPU 内存，未超出份额", "可见 24\u00a0GiB NPU 内存，超出了份额"),
    ],
)
def test_the_student_sees_the_self_test_on_the_session_card(world, running, language, within, over):
    client = client_for(running.student)
    report(running, 8192)
    assert within in get(client, "/", language)

    report(running, 24576)
    assert over in get(client, "/", language)


@pytest.mark.parametrize(("language", "badge"), [("en", "isolation suspect"), ("zh-hans", "隔离存疑")])
def test_the_operator_card_page_shows_the_suspect_mark_and_the_sessions_self_test(
    world,
    people,
    running,
    language,
    badge,
):
    card = running.allocation.card
    url = f"/ops/cards/{card.pk}/"
    assert badge not in get(client_for(people["platform"]), url, language)

    report(running, 24576)
    page = get(client_for(people["platform"]), url, language)

    assert badge in page and "24 GiB" in page
    assert f'action="/ops/cards/{card.pk}/isolation/clear/"' in page


@pytest.mark.parametrize("visitor", VISITORS)
def test_only_a_platform_operator_clears_the_mark_and_it_is_audited(world, people, running, visitor):
    card = running.allocation.card
    report(running, 24576)

    client_for(people[visitor]).post(f"/ops/cards/{card.pk}/isolation/clear/")

    assert Card.objects.get(pk=card.pk).isolation_suspect == (visitor != "platform")
    assert AuditEvent.objects.filter(action="card.isolation_cleared").count() == (visitor == "platform")


def test_the_clear_action_needs_the_csrf_token(world, people, running):
    from django.test import Client

    card = running.allocation.card
    report(running, 24576)
    client = Client(enforce_csrf_checks=True)
    client.force_login(people["platform"])

    assert client.post(f"/ops/cards/{card.pk}/isolation/clear/").status_code == 403
    assert Card.objects.get(pk=card.pk).isolation_suspect is True


def test_the_cluster_page_marks_a_suspect_card(world, people, running):
    client = client_for(people["platform"])
    assert "isolation suspect" not in get(client, "/ops/")

    report(running, 24576)

    assert "isolation suspect" in get(client, "/ops/")
