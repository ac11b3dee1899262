"""End to end on a real Celery worker and the simulator driver: a session launched and stopped
reaches the LMS receiver as queued, running, ended and usage recorded, in order, signed, after
the receiver's first answers were 500s; and a worker killed while posting leaves the delivery
pending, to be picked up by the sweep once its lease runs out."""

from __future__ import annotations

import pytest

from labs.domain.reasons import Reason
from labs.services.sessions import session_launch, session_stop
from tests.conftest import wait_for
from webhooks.models import Delivery
from webhooks.services import subscription_create

pytestmark = [pytest.mark.slow]

ALL = ["session.queued", "session.running", "session.ended", "usage.recorded"]


def test_a_launch_and_stop_reach_the_lms_in_order_after_retries(world, start_worker, receiver):
    subscription, receiver.secret = subscription_create(
        institution=world["course"].institution, url=receiver.url, event_types=ALL, courses=[world["course"]]
    )
    receiver.statuses = [500, 500]  # the LMS is down for the first two attempts
    # One process, so the receiver sees the events in the order they were stored.
    worker = start_worker(concurrency=1, LAB_SIMULATOR_DELAY_SECONDS="0.3", WEBHOOK_RETRY_BASE_SECONDS="0.2")
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])

    def kinds() -> list[str]:
        return [e["type"] for e in receiver.verified_events()]

    log = lambda: f"{kinds()}; worker log:\n{worker.output()[-4000:]}"  # noqa: E731
    wait_for(lambda: kinds() == ["session.queued", "session.running"], timeout=60, message=log)
    session_stop(session_id=session.pk, reason=Reason.of("session.stopped_by", who="tester"))
    wait_for(lambda: len(kinds()) == 4, timeout=60, message=log)
    events = receiver.verified_events()
    assert kinds() == ALL
    assert {e["data"]["session"] for e in events} == {str(session.pk)}
    assert events[2]["data"]["end_state"] == "stopped" and events[2]["data"]["reason_code"] == "session.stopped_by"
    assert events[3]["data"]["core_percent"] == 5 and events[3]["data"]["core_percent_seconds"] >= 0
    queued = Delivery.objects.get(event_type="session.queued")
    assert queued.state == "succeeded" and [a.status_code for a in queued.attempt_log.all()] == [500, 500, 204]
    assert [r.status for r in receiver.got[:3]] == [500, 500, 204]
    assert len({r.headers["webhook-id"] for r in receiver.got[:3]}) == 1  # one message, tried three times
    # The receiver has answered the last one; the worker records its success a moment later.
    succeeded = lambda: Delivery.objects.filter(subscription=subscription, state="succeeded").count()  # noqa: E731
    wait_for(lambda: succeeded() == 4, timeout=10, message=lambda: f"{succeeded()} of 4 deliveries succeeded; {log()}")


def test_a_delivery_whose_worker_is_killed_while_posting_is_retried(world, start_worker, receiver):
    subscription, receiver.secret = subscription_create(
        institution=world["course"].institution, url=receiver.url, event_types=["session.queued"]
    )
    receiver.hold_next = 3  # the first POST hangs; the worker is killed meanwhile
    fast = {"WEBHOOK_TIMEOUT_SECONDS": "1", "WEBHOOK_SWEEP_SECONDS": "0.5", "CELERY_VISIBILITY_TIMEOUT": "600"}
    doomed = start_worker(name="doomed", concurrency=1, **fast)
    session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    wait_for(receiver.arrived.is_set, timeout=60, message=lambda: doomed.output()[-4000:])
    doomed.kill()
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.lease_until is not None) == ("pending", 0, True)
    # A new worker with beat: the lease (2 x timeout + 1 s) runs out and the sweep sends it again.
    rescuer = start_worker(name="rescuer", concurrency=1, beat=True, **fast)
    wait_for(
        lambda: Delivery.objects.filter(pk=delivery.pk, state="succeeded").exists(),
        timeout=60,
        message=lambda: rescuer.output()[-4000:],
    )
    delivery.refresh_from_db()
    assert delivery.attempts == 1 and [a.status_code for a in delivery.attempt_log.all()] == [204]
    # At least once: the receiver got the killed worker's POST too, with the same webhook-id to drop it by.
    assert [r.headers["webhook-id"] for r in receiver.got] == [delivery.message_id] * 2
