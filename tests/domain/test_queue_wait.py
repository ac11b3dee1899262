"""The wait estimate of a queued session and the session deadline it is built on."""

import pytest

from labs.domain.lifecycle import session_deadline, session_limit_minutes
from labs.domain.queue import release_at, wait_estimate_seconds

NOW = 1_000_000.0


def test_the_limit_is_the_shorter_of_the_template_and_the_course():
    assert session_limit_minutes(240, 180) == 180
    assert session_limit_minutes(90, 180) == 90
    assert session_limit_minutes(None, 180) == 180
    assert session_limit_minutes(None, None) is None


def test_the_deadline_counts_from_when_the_session_runs():
    assert session_deadline(NOW, 180) == NOW + 180 * 60
    assert session_deadline(None, 180) is None
    assert session_deadline(NOW, None) is None


def test_each_holding_state_gives_its_quota_back_at_its_latest_time():
    assert release_at("running", running_at=NOW - 600, limit_minutes=60, now=NOW) == NOW + 3000
    assert release_at("starting", running_at=None, limit_minutes=60, now=NOW) == NOW + 3600
    assert release_at("admitted", running_at=None, limit_minutes=60, now=NOW) == NOW + 3600
    assert release_at("stopping", running_at=NOW - 600, limit_minutes=60, now=NOW) == NOW
    assert release_at("running", running_at=NOW, limit_minutes=None, now=NOW) is None


@pytest.mark.parametrize("state", ["queued", "stopped", "failed"])
def test_a_session_that_holds_no_quota_has_no_release(state):
    with pytest.raises(ValueError, match="holds no quota"):
        release_at(state, running_at=None, limit_minutes=60, now=NOW)


def test_the_session_at_position_p_waits_for_the_p_th_release():
    releases = [NOW + 900, NOW + 300, None, NOW + 600]
    assert wait_estimate_seconds(position=1, reason_code="quota.instances", releases=releases, now=NOW) == 300
    assert wait_estimate_seconds(position=2, reason_code="quota.core", releases=releases, now=NOW) == 600
    assert wait_estimate_seconds(position=3, reason_code="quota.memory", releases=releases, now=NOW) == 900


def test_more_sessions_ahead_than_known_releases_gives_no_estimate():
    assert wait_estimate_seconds(position=2, reason_code="quota.instances", releases=[NOW + 60, None], now=NOW) is None


@pytest.mark.parametrize("code", ["", "session.queued", "card.memory", "quota.borrowing_limit_instances", "student.limit"])
def test_a_wait_not_on_the_course_quota_gives_no_estimate(code):
    assert wait_estimate_seconds(position=1, reason_code=code, releases=[NOW + 60], now=NOW) is None


def test_a_release_already_due_is_a_wait_of_zero_not_a_negative_one():
    assert wait_estimate_seconds(position=1, reason_code="quota.instances", releases=[NOW - 30], now=NOW) == 0


@pytest.mark.parametrize("position", [0, -1, 1.5, True, "1"])
def test_a_position_that_is_not_a_positive_integer_is_rejected(position):
    with pytest.raises(ValueError, match="queue position"):
        wait_estimate_seconds(position=position, reason_code="quota.instances", releases=[], now=NOW)
