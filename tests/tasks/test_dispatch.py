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
