"""Live card updates: words in each reader's language, queue places after a pass admits others."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from labs.consumers import SessionUpdatesConsumer
from labs.domain.reasons import Reason
from labs.models import LabSession
from labs.services.allocation import allocation_pass
from labs.services.sessions import session_launch, session_stop

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def communicator(user, language=None, query=""):
    comm = WebsocketCommunicator(SessionUpdatesConsumer.as_asgi(), f"/ws/sessions/{query}")
    comm.scope["user"] = user
    if language:
        comm.scope["cookies"] = {"django_language": language}
    if query:
        comm.scope["query_string"] = query.lstrip("?").encode()
    return comm


@pytest.fixture
def course_of_five(transactional_db):
    from tests.factories import course_with_students, node_with_cards

    node_with_cards()
    course, templates, students, instructor = course_with_students(5, code="AI101", quota={"instance_count": 1})
    return {"course": course, "small": templates[0], "students": students, "instructor": instructor}


async def next_payloads(comm) -> list[dict]:
    message = await comm.receive_json_from(timeout=5)
    assert message["type"] == "sessions"
    return message["sessions"]


async def test_a_chinese_reader_gets_the_state_reason_and_share_in_chinese_and_an_english_one_in_english(course_of_five):
    world = course_of_five
    holder, student = world["students"][:2]
    await sync_to_async(session_launch)(student=holder, course=world["course"], template=world["small"])
    await sync_to_async(allocation_pass)()
    chinese = communicator(student, "zh-hans")
    english = communicator(world["instructor"], "en", f"?course={world['course'].pk}")
    assert (await chinese.connect())[0] and (await english.connect())[0]

    await sync_to_async(session_launch)(student=student, course=world["course"], template=world["small"])
    await sync_to_async(allocation_pass)()

    (zh,) = await next_payloads(chinese)
    assert zh["state_label"] == "排队中"
    assert zh["reason"] == "课程配额：已使用 1 / 1 个实例"
    assert zh["share_text"] == "保证单张 NPU 5\u00a0% 的 AI Core 算力，显存 4\u00a0GiB"
    assert (zh["queue_position"], zh["queue_length"], zh["course"]) == (1, 1, "AI101")
    (en,) = await next_payloads(english)
    assert (en["state_label"], en["reason"]) == ("queued", "course quota: 1 of 1 instances in use")
    assert en["share_text"] == "5\u00a0% of one NPU's AI Core guaranteed, 4\u00a0GiB memory"
    await chinese.disconnect()
    await english.disconnect()


async def test_each_reader_gets_the_cards_timed_lines_composed_in_their_language(course_of_five):
    world = course_of_five
    holder, student = world["students"][:2]
    await sync_to_async(session_launch)(student=holder, course=world["course"], template=world["small"])
    await sync_to_async(allocation_pass)()
    chinese = communicator(student, "zh-hans")
    english = communicator(world["instructor"], "en", f"?course={world['course'].pk}")
    assert (await chinese.connect())[0] and (await english.connect())[0]

    await sync_to_async(session_launch)(student=student, course=world["course"], template=world["small"])
    await sync_to_async(allocation_pass)()

    (zh,) = await next_payloads(chinese)
    assert zh["lines"]["queue"]["text"].startswith("AI101 队列第 1 位，")
    assert (zh["lines"]["started"], zh["lines"]["left"], zh["lines"]["stops"]) == (None, None, None)
    (en,) = await next_payloads(english)
    assert en["lines"]["queue"]["text"].startswith("#1 in AI101's queue, ")
    await chinese.disconnect()
    await english.disconnect()


async def test_a_pass_that_admits_the_head_of_the_queue_tells_those_behind_their_new_place(course_of_five):
    world = course_of_five
    holder, *queued_students = world["students"][:4]
    held = await sync_to_async(session_launch)(student=holder, course=world["course"], template=world["small"])
    await sync_to_async(allocation_pass)()
    queued = []
    for s in queued_students:
        queued.append(await sync_to_async(session_launch)(student=s, course=world["course"], template=world["small"]))
    await sync_to_async(allocation_pass)()  # all three now wait on the course quota
    last = await sync_to_async(LabSession.objects.get)(pk=queued[-1].pk)
    last_comm = communicator(queued_students[-1])
    assert (await last_comm.connect())[0]
    # A student whose session is not behind the admitted one hears nothing.
    holder_comm = communicator(world["students"][4])
    assert (await holder_comm.connect())[0]

    # The holder's session ends; the next pass admits the head of the queue. The reason of the
    # two still waiting stays the same ("1 of 1 instances in use"), only their place moves.
    await sync_to_async(session_stop)(session_id=held.pk, reason=Reason.of("session.stopped_by", who="t"))
    result = await sync_to_async(allocation_pass)()
    assert result.admitted == [str(queued[0].pk)]

    (payload,) = await next_payloads(last_comm)
    assert payload["id"] == str(last.pk)
    assert payload["version"] == last.version  # the session itself did not change
    assert (payload["state"], payload["queue_position"], payload["queue_length"]) == ("queued", 2, 2)
    assert await holder_comm.receive_nothing(timeout=0.5)
    await last_comm.disconnect()
    await holder_comm.disconnect()


async def test_words_written_in_the_reader_s_language_are_sent_as_they_are_and_others_rendered_again(course_of_five, monkeypatch):
    from django.utils import translation

    import labs.consumers

    rendered = []
    original = labs.consumers.localised
    monkeypatch.setattr(labs.consumers, "localised", lambda payload: rendered.append(payload["id"]) or original(payload))
    world = course_of_five
    student = world["students"][0]
    chinese = communicator(student, "zh-hans")
    english = communicator(world["instructor"], "en", f"?course={world['course'].pk}")
    assert (await chinese.connect())[0] and (await english.connect())[0]

    def launch_and_stop_in_chinese():
        with translation.override("zh-hans"):  # a page in Chinese stops it: the publish is in Chinese
            session = session_launch(student=student, course=world["course"], template=world["small"])
            session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who=student.username))
        return session

    session = await sync_to_async(launch_and_stop_in_chinese)()

    (zh,) = await next_payloads(chinese)
    assert (zh["id"], zh["state_label"]) == (str(session.pk), "已停止")
    (en,) = await next_payloads(english)
    assert (en["state_label"], en["reason"]) == ("stopped", f"stopped by {student.username}")
    assert rendered == [str(session.pk)]  # only the English reader's copy was rendered again
    await chinese.disconnect()
    await english.disconnect()


async def test_a_reader_of_the_publisher_s_language_gets_the_text_as_written_and_an_earlier_release_s_message_still_reads(
    course_of_five,
):
    from channels.layers import get_channel_layer

    from labs.services.events import sessions_message, student_group

    student = course_of_five["students"][0]
    comm = communicator(student, "en")
    assert (await comm.connect())[0]
    layer = get_channel_layer()
    payloads = [{"id": "a", "state": "queued", "course": "AI101 人工智能"}]

    message = sessions_message(payloads, "en")
    await layer.group_send(student_group(student.pk), message)
    text = await comm.receive_from(timeout=5)
    assert text == message["text"] == '{"type":"sessions","sessions":[{"id":"a","state":"queued","course":"AI101 人工智能"}]}'

    # A process of the release before (``sessions`` as a list, no text) during an upgrade.
    await layer.group_send(student_group(student.pk), {"type": "sessions.update", "sessions": payloads, "language": "en"})
    assert await comm.receive_json_from(timeout=5) == {"type": "sessions", "sessions": payloads}
    await comm.disconnect()
