"""A launch or stop whose change committed never fails because the broker is down."""

import socket

import pytest

from labs import dispatch
from labs.models import LabSession
from tests.views.test_pages import LAUNCH, launch_data, logged_in, post_json


@pytest.fixture
def broker_down(settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    dispatch._redis.cache_clear()
    yield
    dispatch._redis.cache_clear()


def test_a_launch_while_the_broker_is_down_is_accepted_and_stays_queued(world, broker_down, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = post_json(logged_in(world["students"][0]), LAUNCH, launch_data(world))

    assert response.status_code == 201
    assert callbacks, "the wake was queued for the commit"
    session = LabSession.objects.get()
    assert (session.state, session.reason) == ("queued", "waiting for the allocation pass")


def test_a_stop_while_the_broker_is_down_is_accepted(world, broker_down, django_capture_on_commit_callbacks):
    client = logged_in(world["students"][0])
    post_json(client, LAUNCH, launch_data(world))
    session = LabSession.objects.get()

    with django_capture_on_commit_callbacks(execute=True):
        response = post_json(client, f"/sessions/{session.pk}/stop/", {})

    assert response.status_code == 200
    session.refresh_from_db()
    assert session.state == "stopped"
