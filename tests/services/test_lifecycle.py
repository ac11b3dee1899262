"""A session's instance driven through the simulator driver, step by step as the tasks do it."""

import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from labs.drivers import get_driver
from labs.models import Allocation, LabSession
from labs.services.allocation import allocation_pass
from labs.services.lifecycle import Next, session_poll_instance, session_start_instance, session_stop_instance, sessions_sweep
from labs.services.sessions import session_launch, session_stop


@pytest.fixture
def admitted(world):
    session = session_launch(student=world["students"][0], course=world["course"], template=world["small"])
    allocation_pass()
    session.refresh_from_db()
    assert session.state == "admitted"
    yield session
    get_driver().delete(str(session.pk))


def poll_until_done(session_id, timeout=10):
    deadline = time.monotonic() + timeout
    while session_poll_instance(session_id) == Next.POLL:
        assert time.monotonic() < deadline, "session did not leave starting"
        time.sleep(0.05)


def test_a_session_starts_runs_and_stops_releasing_its_allocation(admitted):
    assert session_start_instance(admitted.pk) == Next.POLL
    admitted.refresh_from_db()
    assert admitted.state == "starting" and admitted.driver_ref
    assert Allocation.objects.get(session=admitted).entity_id == admitted.driver_ref
    poll_until_done(admitted.pk)
    admitted.refresh_from_db()
    assert admitted.state == "running"
    assert admitted.access_url.startswith("https://lab.simulator.invalid/")
    assert session_stop(session_id=admitted.pk, reason="stopped by student")
    session_stop_instance(admitted.pk)
    admitted.refresh_from_db()
    assert admitted.state == "stopped" and admitted.reason == "stopped by student"
    assert Allocation.objects.get(session=admitted).released_at is not None
    assert str(admitted.pk) not in get_driver().list()


def test_running_each_step_twice_changes_nothing(admitted):
    session_start_instance(admitted.pk)
    admitted.refresh_from_db()
    ref, version = admitted.driver_ref, admitted.version
    assert session_start_instance(admitted.pk) == Next.POLL  # redelivered: same instance
    admitted.refresh_from_db()
    assert (admitted.driver_ref, admitted.version) == (ref, version)
    poll_until_done(admitted.pk)
    admitted.refresh_from_db()
    version = admitted.version
    assert session_poll_instance(admitted.pk) == Next.DONE
    session_stop(session_id=admitted.pk, reason="bye")
    session_stop_instance(admitted.pk)
    admitted.refresh_from_db()
    ended = (admitted.state, admitted.version, Allocation.objects.get(session=admitted).released_at)
    session_stop_instance(admitted.pk)
    assert session_stop(session_id=admitted.pk, reason="again") is False
    admitted.refresh_from_db()
    assert (admitted.state, admitted.version, Allocation.objects.get(session=admitted).released_at) == ended


def test_a_driver_refusal_fails_the_session_through_stopping(admitted):
    admitted.template.image = "reject:this-image"
    admitted.template.save(update_fields=["image"])
    assert session_start_instance(admitted.pk) == Next.DONE
    admitted.refresh_from_db()
    assert admitted.state == "stopping" and admitted.end_state == "failed"
    assert "could not start" in admitted.reason
    session_stop_instance(admitted.pk)
    admitted.refresh_from_db()
    assert admitted.state == "failed"
    assert Allocation.objects.get(session=admitted).released_at is not None


def test_an_instance_that_fails_while_starting_fails_the_session_with_its_message(admitted):
    session_start_instance(admitted.pk)
    get_driver().inject_failure(str(admitted.pk), "image pull failed: no such image")
    assert session_poll_instance(admitted.pk) == Next.DONE
    session_stop_instance(admitted.pk)
    admitted.refresh_from_db()
    assert admitted.state == "failed"
    assert admitted.reason == "image pull failed: no such image"


@override_settings(LAB_SPAWN_TIMEOUT_SECONDS=5)
def test_a_session_that_overruns_the_spawn_timeout_fails_with_the_reason(admitted):
    session_start_instance(admitted.pk)
    LabSession.objects.filter(pk=admitted.pk).update(started_at=timezone.now() - timedelta(seconds=6))
    assert session_poll_instance(admitted.pk) == Next.DONE
    session_stop_instance(admitted.pk)
    admitted.refresh_from_db()
    assert (admitted.state, admitted.reason) == ("failed", "did not start within 5 s")


def test_stopping_while_the_driver_creates_leaves_no_instance_behind(admitted):
    from labs.services.sessions import session_transition

    session_transition(admitted.pk, to="starting")
    # The student stops the session before the start task has created the instance.
    session_stop(session_id=admitted.pk, reason="too slow")
    session_stop_instance(admitted.pk)
    assert session_start_instance(admitted.pk) == Next.DONE
    assert str(admitted.pk) not in get_driver().list()


def test_the_sweep_ends_a_session_past_its_maximum_length(admitted, django_capture_on_commit_callbacks):
    session_start_instance(admitted.pk)
    poll_until_done(admitted.pk)
    LabSession.objects.filter(pk=admitted.pk).update(running_at=timezone.now() - timedelta(minutes=181))
    with django_capture_on_commit_callbacks(execute=False):
        counts = sessions_sweep()
    assert counts["expired"] == 1
    admitted.refresh_from_db()
    assert admitted.state == "stopping"
    assert admitted.reason == "reached the 180-minute limit"


def test_a_jupyter_link_without_the_token_gets_the_sessions_token(admitted):
    from labs.services.lifecycle import _with_jupyter_token

    admitted.template.kind = "jupyter"
    url = _with_jupyter_token("https://labs.example.edu/labs/abc/?x=1", admitted)
    assert url == f"https://labs.example.edu/labs/abc/?x=1&token={admitted.secret}"
    assert _with_jupyter_token("http://127.0.0.1:9/lab?token=t", admitted) == "http://127.0.0.1:9/lab?token=t"
    admitted.template.kind = "vllm"
    assert _with_jupyter_token("https://labs.example.edu/labs/abc/", admitted) == "https://labs.example.edu/labs/abc/"
