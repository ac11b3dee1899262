"""The student page's session card, first render: words in the reader's language, the demo notice."""

from __future__ import annotations

from datetime import timedelta

from bs4 import BeautifulSoup
from django.test import Client, override_settings
from django.utils import timezone

from labs.domain.states import SessionState
from labs.models import LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_transition

NOTICE = "the NPU shares shown here are booked but not enforced on this machine"


def page(user, language: str = "en") -> str:
    client = Client()
    client.force_login(user)
    client.cookies["django_language"] = language
    response = client.get("/")
    assert response.status_code == 200
    return response.content.decode()


def queued_behind_a_running_session(world):
    """Student 0 runs (came up 60.5 min ago, so 119 min are left of 180); student 1 is first in the queue."""
    world["course"].quota.instance_count = 1
    world["course"].quota.save(update_fields=["instance_count"])
    running = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    assert session_transition(running.pk, to=SessionState.STARTING)
    assert session_transition(running.pk, to=SessionState.RUNNING, access_url="http://lab/")
    LabSession.objects.filter(pk=running.pk).update(running_at=timezone.now() - timedelta(minutes=60, seconds=30))
    queued = session_launch(student=world["students"][1], course=world["course"], template=world["small"])
    allocation_pass()
    return running, queued


def test_a_queued_card_says_its_place_and_wait_and_a_running_card_its_time_left_in_english(world):
    queued_behind_a_running_session(world)
    code = world["course"].code
    waiting = page(world["students"][1])
    assert f"#1 in {code}&#x27;s queue, about 1 h 59 min" in waiting
    assert "5\u00a0% of one NPU&#x27;s AI Core guaranteed, 4\u00a0GiB memory" in waiting
    assert ">queued<" in waiting
    running = page(world["students"][0])
    assert "1 h 59 min left" in running
    assert "stops at " in running
    assert "n1 / NPU " in running


def test_the_card_is_in_chinese_for_a_chinese_reader(world):
    queued_behind_a_running_session(world)
    code = world["course"].code
    waiting = page(world["students"][1], "zh-hans")
    assert f"{code} 队列第 1 位，约需等待 1 小时 59 分钟" in waiting
    assert "保证单张 NPU 5\u00a0% 的 AI Core 算力，显存 4\u00a0GiB" in waiting
    assert ">排队中<" in waiting
    running = page(world["students"][0], "zh-hans")
    assert "剩余 1 小时 59 分钟" in running
    assert ">运行中<" in running
    assert "运行于" in running


def test_the_page_embeds_the_phrases_its_script_composes_timed_lines_from_in_the_readers_language(world):
    html = page(world["students"][0], "zh-hans")
    assert '<script id="session-card-words" type="application/json">' in html
    assert "\\u5269\\u4f59 %(duration)s" in html  # 剩余 %(duration)s, escaped by json_script


def test_the_demo_says_shares_are_not_enforced(world):
    assert NOTICE in page(world["students"][0])
    assert "本机不会实际强制执行" in page(world["students"][0], "zh-hans")


@override_settings(LAB_SHARES_ENFORCED=True)
def test_a_portal_on_npus_does_not_say_so(world):
    assert NOTICE not in page(world["students"][0])


def reason_lines(html: str) -> list:
    return BeautifulSoup(html, "html.parser").select("#sessions article.session [data-field=reason]")


def test_a_running_card_has_no_empty_reason_line_and_a_waiting_card_says_why(world):
    queued_behind_a_running_session(world)
    running = reason_lines(page(world["students"][0]))
    waiting = reason_lines(page(world["students"][1]))
    assert len(running) == 1 and len(waiting) == 1
    assert running[0].get_text() == "" and running[0].has_attr("hidden")
    assert waiting[0].get_text().strip() and not waiting[0].has_attr("hidden")
