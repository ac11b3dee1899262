"""Waking the controller through the real Redis broker: coalesced, and never lost."""

import pytest
import redis
from django.conf import settings

from labs import dispatch


@pytest.fixture
def broker():
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete("celery", dispatch.QUEUED_KEY, dispatch.GENERATION_KEY, dispatch.FOLLOW_UP_KEY)
    yield client
    client.delete("celery", dispatch.QUEUED_KEY, dispatch.GENERATION_KEY, dispatch.FOLLOW_UP_KEY)


def test_a_burst_of_wakes_queues_one_controller_run_and_counts_every_wake(broker):
    for _ in range(50):
        dispatch._wake_now()

    assert broker.llen("celery") == 1
    assert dispatch.controller_generation() == 50


def test_a_wake_after_a_run_has_started_queues_another_run(broker):
    dispatch._wake_now()
    dispatch.controller_dequeued()  # the queued run starts

    dispatch._wake_now()

    assert broker.llen("celery") == 2


def test_only_one_follow_up_is_pending_at_a_time(broker):
    for _ in range(5):
        dispatch.controller_follow_up(2.0)

    assert broker.llen("celery") == 1


def test_while_a_run_holds_the_lock_a_burst_queues_one_more_run_and_the_holder_sends_one_for_later_wakes(broker):
    dispatch._wake_now()
    dispatch.controller_dequeued()  # the run's round starts, holding the lock
    seen = dispatch.controller_generation()

    dispatch._wake_now()  # queues a run; it will find the lock held and leave the marker set
    for _ in range(20):
        dispatch._wake_now()
    assert broker.llen("celery") == 2

    dispatch.controller_done(seen)  # the holder ends: the wakes after its round began get a run

    assert broker.llen("celery") == 3
    assert broker.exists(dispatch.QUEUED_KEY)


def test_a_run_that_ends_with_no_wake_since_its_last_round_sends_nothing_and_clears_the_marker(broker):
    dispatch._wake_now()
    dispatch.controller_dequeued()
    seen = dispatch.controller_generation()

    dispatch.controller_done(seen)

    assert broker.llen("celery") == 1
    assert not broker.exists(dispatch.QUEUED_KEY)
    dispatch._wake_now()  # the next launch queues a run again
    assert broker.llen("celery") == 2


def test_a_wake_whose_count_fails_marks_nothing_and_sends_nothing(broker, caplog):
    broker.set(dispatch.GENERATION_KEY, "not a number")

    dispatch._wake_now()

    assert not broker.exists(dispatch.QUEUED_KEY)
    assert broker.llen("celery") == 0
    assert "could not wake the controller" in caplog.text
