"""The timed lines of a session card, composed in the active language."""

import uuid
from types import SimpleNamespace

import pytest
from django.template.loader import get_template
from django.urls import reverse, set_script_prefix
from django.utils import timezone, translation

from labs.presentation import PHRASES, card_line, card_lines, card_text, card_words, duration_text
from labs.templatetags.session_card import (
    READ_AT_STAND_IN,
    STAND_IN_TOKEN,
    _settled_card,
    card_line_tag,
    session_data_tag,
    session_url_tag,
)

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
STOPS = "2027-01-15T10:13:30+00:00"


@pytest.mark.parametrize(
    "seconds, english, chinese",
    [
        (0, "less than a minute", "不到 1 分钟"),
        (179, "2 min", "2 分钟"),
        (3600, "1 h 0 min", "1 小时 0 分钟"),
        (7980, "2 h 13 min", "2 小时 13 分钟"),
    ],
)
def test_a_duration_is_whole_minutes_rounded_down(seconds, english, chinese):
    with translation.override("en"):
        assert duration_text(seconds) == english
    with translation.override("zh-hans"):
        assert duration_text(seconds) == chinese


def test_a_running_card_says_when_it_started_how_long_is_left_and_when_it_stops():
    card = {"started_at": "2027-01-15T07:10:00+00:00", "stops_at": STOPS}
    with translation.override("en"), timezone.override("UTC"):
        lines = [card_text(card, piece, now=NOW) for piece in ("started", "left", "stops", "queue")]
    assert lines == ["started 07:10", "2 h 13 min left", "stops at 10:13", ""]


def test_a_queued_card_says_its_place_and_the_wait_or_that_it_waits():
    card = {"course": "AI101", "queue_position": 7, "wait_seconds": 185}
    with translation.override("en"):
        assert card_text(card, "queue", now=NOW) == "#7 in AI101's queue, about 3 min"
        assert card_text({**card, "wait_seconds": None}, "queue", now=NOW) == "#7 in AI101's queue, waiting"
        assert card_text({**card, "wait_seconds": 20}, "queue", now=NOW) == "#7 in AI101's queue, next within a minute"
        assert card_text(card, "left", now=NOW) == ""
    with translation.override("zh-hans"):
        assert card_text(card, "queue", now=NOW) == "AI101 队列第 7 位，约需等待 3 分钟"


def test_every_phrase_the_script_uses_has_a_chinese_translation():
    with translation.override("zh-hans"):
        chinese = card_words()
    assert set(chinese) == set(PHRASES)
    assert all(chinese[key] != PHRASES[key] for key in PHRASES), chinese


def test_an_unknown_piece_is_refused():
    with pytest.raises(ValueError, match="unknown card piece"):
        card_text({}, "eta", now=NOW)


def test_the_data_attributes_come_from_the_payload_and_a_blank_template_gets_empty_ones():
    queued = {
        "id": "6f0c4f64-7a61-4ac1-8d6f-6a5f1c9d2e01",
        "version": 3,
        "read_at_ms": 1_800_000_000_123,
        "state": "queued",
        "course": "AI<101>",
        "started_at": None,
        "stops_at": None,
        "queue_position": 1,
        "wait_seconds": 0,
    }
    assert session_data_tag(queued) == (
        ' data-session-id="6f0c4f64-7a61-4ac1-8d6f-6a5f1c9d2e01" data-version="3" data-read-at-ms="1800000000123"'
        ' data-state="queued" data-course-code="AI&lt;101&gt;" data-started-at="" data-stops-at=""'
        ' data-queue-position="1" data-wait-seconds="0"'
    )
    blank = (
        ' data-session-id="" data-version="0" data-read-at-ms="0" data-state="" data-course-code="" data-started-at=""'
        ' data-stops-at="" data-queue-position="" data-wait-seconds=""'
    )
    assert session_data_tag(None) == session_data_tag("") == blank


def test_a_line_comes_composed_but_for_the_slot_the_page_fills_as_the_clock_moves():
    queued = {"course": "AI101", "queue_position": 7, "wait_seconds": 185}
    running = {"started_at": "2027-01-15T07:10:00+00:00", "stops_at": STOPS}
    with translation.override("zh-hans"):
        assert card_line(queued, "queue") == {
            "text": "AI101 队列第 7 位，约需等待 %(duration)s",
            "seconds": 185,
            "soon": "AI101 队列第 7 位，1 分钟内轮到",
        }
    with translation.override("en"):
        assert card_line({**queued, "wait_seconds": None}, "queue") == {"text": "#7 in AI101's queue, waiting"}
        assert card_line(running, "started") == {"text": "started %(time)s", "at": running["started_at"]}
        assert card_line(running, "left") == {"text": "%(duration)s left", "until": STOPS}
        assert card_line(running, "stops") == {"text": "stops at %(time)s", "at": STOPS}
        assert card_line(queued, "left") is None


def test_the_page_gets_each_line_in_a_data_attribute_and_a_line_that_does_not_apply_gets_none():
    card = {"lines": {"queue": {"text": "#1 in <AI101>'s queue, waiting"}, "left": None}}

    assert card_line_tag(card, "queue") == (
        ' data-line="{&quot;text&quot;: &quot;#1 in &lt;AI101&gt;&#x27;s queue, waiting&quot;}"'
    )
    assert card_line_tag(card, "left") == card_line_tag(None, "queue") == ""


SESSION_URLS = ("session-stop", "session-extend", "session-keep", "session-smaller", "session-detail", "session-selftest")


@pytest.mark.parametrize("script_prefix", ["/", "/portal/"])
def test_a_session_url_is_the_one_django_reverses(script_prefix):
    session_id = uuid.uuid4()
    set_script_prefix(script_prefix)
    try:
        for name in SESSION_URLS:
            expected = reverse(f"labs:{name}", args=[session_id])
            assert expected.startswith(script_prefix)
            assert session_url_tag(f"labs:{name}", session_id) == expected
            assert session_url_tag(f"labs:{name}", str(session_id)) == expected  # the card's id is text
    finally:
        set_script_prefix("/")


def test_a_session_url_of_something_that_is_no_session_id_is_refused():
    with pytest.raises(ValueError):
        session_url_tag("labs:session-stop", "../../admin")


def test_the_card_and_the_row_post_to_their_sessions_urls(rf):
    session_id = uuid.uuid4()
    request = rf.get("/")
    card = {"id": str(session_id), "lines": {"queue": None, "started": None, "left": None, "stops": None}}
    card_html = get_template("labs/_session_card.html").render({"s": {"card": card}}, request)
    for name in ("session-stop", "session-extend", "session-keep", "session-smaller"):
        assert f'action="{reverse(f"labs:{name}", args=[session_id])}"' in card_html
    row_html = get_template("labs/_session_row.html").render({"s": {"card": card, "pk": session_id}}, request)
    assert f'action="{reverse("labs:session-stop", args=[session_id])}"' in row_html


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_blank_card_is_the_included_one_with_the_pages_token(rf, settings, language):
    from django.template import engines

    settings.DEBUG = False
    page = engines["django"].from_string(
        '{% load session_card %}<a>{% include "labs/_session_card.html" with s=None %}</a><b>{% blank_session_card %}</b>'
    )
    with translation.override(language):
        for _ in range(2):  # rendered, then remembered
            html = page.render({}, rf.get("/"))
            included, blank = html.split("</a><b>")
            assert blank.removesuffix("</b>") == included.removeprefix("<a>")
            assert "csrfmiddlewaretoken" in included and STAND_IN_TOKEN not in html
    with translation.override("en"):
        english = page.render({}, rf.get("/"))
    assert english != html  # each language its own card


def test_a_session_url_follows_the_urlconf_in_force(settings):
    session_id = uuid.uuid4()
    assert session_url_tag("labs:session-stop", session_id) == f"/sessions/{session_id}/stop/"
    settings.ROOT_URLCONF = "tests.templatetags.prefixed_urls"
    assert session_url_tag("labs:session-stop", session_id) == f"/portal/sessions/{session_id}/stop/"


def _card(state: str, **fields) -> SimpleNamespace:
    """A session as the dashboard draws it: its state and its payload (the owner's), lines composed."""
    card = {
        "id": str(uuid.uuid4()),
        "version": 7,
        "read_at_ms": 1_800_000_000_123.456,
        "state": state,
        "state_label": state.title(),
        "reason": "",
        "template": "PyTorch <small>",
        "course": "AI101",
        "started_at": "2027-01-15T07:10:00+00:00",
        "stops_at": None,
        "queue_position": None,
        "wait_seconds": None,
        "share_text": "5 % AI Core, 4 GiB",
        "selftest_text": "",
        "placement": "",
        "smaller_offer": None,
        "smaller_offer_text": "",
        "access_url": "",
        "can_keep": False,
        "extensions_left": 0,
        "extend_label": "",
        "can_stop": False,
        **fields,
    }
    card["lines"] = card_lines(card)
    return SimpleNamespace(state=state, card=card)


PAGE = '{% load session_card %}<a>{% include "labs/_session_card.html" with s=s %}</a><b>{% session_card s %}</b>'


def _drawn_both_ways(rf, session) -> tuple[str, str]:
    from django.template import engines

    html = engines["django"].from_string(PAGE).render({"s": session}, rf.get("/"))
    included, drawn = html.split("</a><b>")
    return included.removeprefix("<a>"), drawn.removesuffix("</b>")


@pytest.mark.parametrize("language, zone", [("en", "UTC"), ("zh-hans", "Asia/Shanghai")])
def test_an_ended_card_is_the_included_one_with_the_pages_token_and_read_time(rf, settings, language, zone):
    settings.DEBUG = False
    session = _card("stopped")
    with translation.override(language), timezone.override(zone):
        included, drawn = _drawn_both_ways(rf, session)
        assert drawn == included
        # Drawn again, as the next page load reads the session again: from the card kept, with
        # this page's token and read time.
        session.card["read_at_ms"] = 1_800_000_060_000.5
        kept = _settled_card.cache_info().hits
        included, drawn = _drawn_both_ways(rf, session)
        assert _settled_card.cache_info().hits == kept + 1
    assert drawn == included
    assert 'data-read-at-ms="1800000060000.5"' in drawn and "csrfmiddlewaretoken" in drawn
    assert STAND_IN_TOKEN not in drawn and READ_AT_STAND_IN not in drawn
    assert ("started 07:10" if language == "en" else "15:10") in drawn


def test_an_ended_card_whose_payload_changed_is_drawn_again(rf, settings):
    settings.DEBUG = False
    session = _card("failed", reason="The image could not be pulled.")
    with translation.override("en"):
        _drawn_both_ways(rf, session)
        session.card["template"] = "PyTorch (renamed)"
        included, drawn = _drawn_both_ways(rf, session)
    assert drawn == included and "PyTorch (renamed)" in drawn


def test_a_card_that_moves_with_the_clock_is_drawn_every_time(rf, settings):
    settings.DEBUG = False
    running = _card("running", stops_at="2099-01-15T10:13:30+00:00", can_stop=True, access_url="https://lab.example/x/")
    queued = _card("queued", started_at=None, queue_position=3, wait_seconds=185)
    kept = _settled_card.cache_info().currsize
    with translation.override("en"), timezone.override("UTC"):
        for session in (running, queued):
            included, drawn = _drawn_both_ways(rf, session)
            assert drawn == included
    assert _settled_card.cache_info().currsize == kept
