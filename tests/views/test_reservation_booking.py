"""Booking a class as a teacher does, through the ASGI application in English and Chinese: the
required fields say so, a weekly class whose first date is past starts at the next meeting and
the page names it, a single date in the past is refused, and a refusal names the bookings and
guarantees in the way."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone, translation

from labs.models import CourseQuota, Reservation
from labs.services.reservations import slot_label
from tests.asgi_client import AsgiClient
from tests.factories import CARD_MIB, course_with_students

pytestmark = pytest.mark.django_db(transaction=True)  # the page is served in the ASGI handler's threads

WORDS = {
    "en": {
        "note": "Fields marked * are required.",
        "required": "This field is required.",
        "first meeting": "first meeting: ",
        "past": "is in the past: a single date must be today or later.",
        "guard": "In the way then: GUARD&#x27;s guarantee holds 800 % / 512 GiB.",
    },
    "zh-hans": {
        "note": "标有 * 的为必填项。",
        "required": "该字段是必填项。",
        "first meeting": "第一次上课：",
        "past": "已经过去：单次日期必须是今天或以后。",
        "guard": "当时占用集群的有：GUARD 的保障占用 800 % / 512 GiB。",
    },
}
LANGUAGES = pytest.mark.parametrize("language", ["en", "zh-hans"])


def page(course) -> str:
    return f"/courses/{course.pk}/reservations/"


def booking(world, **overrides) -> dict:
    data = {"template": world["small"].pk, "count": 4, "start_time": "14:00", "minutes": 90}
    data.update(overrides)
    return data


def field(html: str, name: str) -> str:
    """The ``<div class="field">`` that holds the input called ``name``."""
    for block in re.findall(r'<div class="field[^"]*">.*?</div>', html, re.S):
        if f'name="{name}"' in block:
            return block
    raise AssertionError(f"no field {name}")


@LANGUAGES
def test_required_fields_are_marked_and_each_says_so_when_left_empty(world, language):
    client = AsgiClient(user=world["instructor"], language=language)
    html = client.get(page(world["course"])).text
    assert WORDS[language]["note"] in html
    for name in ("template", "count", "start_time", "minutes"):
        block = field(html, name)
        assert 'aria-required="true"' in block and '<span class="muted" aria-hidden="true">*</span></label>' in block, name
        # A select always holding a choice takes no ``required``: HTML allows it only beside an empty option.
        assert name == "template" or re.search(r"<input[^>]* required[ >]", block), name
    for name in ("first_date", "last_date", "dates"):
        assert "aria-required" not in field(html, name) and " required" not in field(html, name), name

    response = client.post(page(world["course"]), {"template": world["small"].pk, "weekdays": ["1"]})
    assert response.status_code == 200
    for name in ("count", "start_time", "minutes"):
        assert WORDS[language]["required"] in field(response.text, name), name
    assert not Reservation.objects.exists()


@LANGUAGES
def test_a_weekly_class_whose_first_date_is_past_starts_at_the_next_meeting(world, language):
    today = timezone.localdate()
    client = AsgiClient(user=world["instructor"], language=language)
    data = booking(
        world,
        weekdays=[str(d) for d in range(7)],
        first_date=(today - timedelta(days=10)).isoformat(),
        last_date=(today + timedelta(days=3)).isoformat(),
        start_time="23:59",
    )
    response = client.post(page(world["course"]), data)
    assert response.status_code == 302
    reservation = Reservation.objects.get()
    slots = list(reservation.slots.order_by("starts_at"))
    assert slots[0].starts_at > timezone.now() and timezone.localtime(slots[-1].starts_at).date() == today + timedelta(days=3)
    assert reservation.first_date == timezone.localtime(slots[0].starts_at).date()
    with translation.override(language):
        first = slot_label(slots[0].starts_at, slots[0].ends_at)
    assert f"{WORDS[language]['first meeting']}{first}" in client.get(page(world["course"])).text


@LANGUAGES
def test_a_single_date_in_the_past_is_refused_on_its_field_and_nothing_is_written(world, language):
    yesterday = (timezone.localdate() - timedelta(days=1)).isoformat()
    response = AsgiClient(user=world["instructor"], language=language).post(
        page(world["course"]), booking(world, dates=yesterday)
    )
    assert response.status_code == 200
    assert f"{yesterday} {WORDS[language]['past']}" in field(response.text, "dates")
    assert not Reservation.objects.exists()


@LANGUAGES
def test_a_refusal_on_an_idle_cluster_names_the_guarantee_that_holds_it(world, language):
    guard, _, _, _ = course_with_students(0, code="GUARD")
    CourseQuota.objects.filter(course=guard).update(core_percent=800, memory_mib=8 * CARD_MIB, instance_count=128)
    tomorrow = (timezone.localdate() + timedelta(days=1)).isoformat()
    response = AsgiClient(user=world["instructor"], language=language).post(page(world["course"]), booking(world, dates=tomorrow))
    assert response.status_code == 200
    refusal = response.text.split('data-testid="reservation-refused">')[1].split("</p>")[0]
    assert WORDS[language]["guard"] in refusal
    assert not Reservation.objects.exists()
