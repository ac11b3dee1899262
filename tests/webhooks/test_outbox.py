"""Nothing lost between the commit and the delivery: a launch made by a process that dies right
after its commit, before anything it asked for on commit was sent, still reaches the LMS, once,
posted by a real worker that beat's sweep hands it to."""

from __future__ import annotations

import time

import pytest

from labs.models import LabSession
from tests.conftest import wait_for
from tests.crash_after_commit import commit_then_die
from webhooks.models import Delivery
from webhooks.services import subscription_create

pytestmark = [pytest.mark.slow]


def test_an_event_whose_process_died_after_the_commit_is_delivered_once(world, start_worker, receiver):
    _subscription, receiver.secret = subscription_create(
        institution=world["course"].institution, url=receiver.url, event_types=["session.queued"]
    )
    student, course, template = world["students"][0], world["course"], world["small"]

    commit_then_die("launch", str(student.pk), str(course.pk), str(template.pk))

    session = LabSession.objects.get()  # the launch committed
    # Two processes, beat sweeping every half second: the delivery is handed out again and again
    # until it is done, and only the worker that claims it posts it.
    worker = start_worker(concurrency=2, beat=True, WEBHOOK_SWEEP_SECONDS="0.5")
    wait_for(
        lambda: receiver.verified_events(),
        timeout=60,
        message=lambda: f"a delivery; deliveries: {list(Delivery.objects.values())}; worker log:\n{worker.output()[-4000:]}",
    )
    wait_for(lambda: Delivery.objects.filter(state="succeeded").exists(), timeout=10, message="the success recorded")
    time.sleep(2)  # four more sweeps: none sends it again
    (event,) = receiver.verified_events()
    assert event["type"] == "session.queued" and event["data"]["session"] == str(session.pk)
    assert len(receiver.got) == 1
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts) == ("succeeded", 1)
