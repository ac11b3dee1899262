"""The lifecycle controller's judgement: ``decide`` (ledger against cluster -> actions), rule by rule."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labs.domain.lifecycle import (
    Bind,
    Create,
    Delete,
    Desired,
    Expire,
    Fail,
    Finish,
    NodeReboot,
    Note,
    Rebind,
    RebootWait,
    Relaunch,
    Restarted,
    Running,
    Seen,
    Timing,
    decide,
)
from labs.domain.reasons import Reason
from labs.domain.states import SessionState

NOW = 10_000.0
TIMING = Timing(spawn_timeout_seconds=300.0, stop_timeout_seconds=120.0)


def starting(**fields) -> Desired:
    return Desired("s1", SessionState.STARTING, started_at=NOW - 10, **fields)


def running(**fields) -> Desired:
    return Desired("s1", SessionState.RUNNING, driver_ref="pod-1", started_at=NOW - 600, **fields)


def stopping(**fields) -> Desired:
    return Desired("s1", SessionState.STOPPING, driver_ref="pod-1", stopping_at=NOW - 10, **fields)


def instance(phase: str = "pending", **fields) -> Seen:
    return Seen("s1", phase, **fields)


def run(sessions: list[Desired] | Desired, seen: dict[str, Seen] | Seen | None) -> list:
    if isinstance(sessions, Desired):
        sessions = [sessions]
    if isinstance(seen, Seen):
        seen = {seen.session_id: seen}
    return decide(sessions, seen, now=NOW, timing=TIMING)


# -- admitted -----------------------------------------------------------------------------------


def test_an_admitted_session_is_created():
    assert run(Desired("s1", SessionState.ADMITTED), {}) == [Create("s1")]


def test_an_admitted_session_is_created_even_when_the_driver_could_not_be_read():
    assert run(Desired("s1", SessionState.ADMITTED), None) == [Create("s1")]


# -- starting: no instance --------------------------------------------------------------------


def test_a_starting_session_without_instance_or_ref_is_created_again_once_its_retry_time_has_come():
    assert run(starting(retry_at=NOW), {}) == [Create("s1")]


def test_a_starting_session_without_instance_or_ref_waits_while_its_retry_time_is_still_ahead():
    assert run(starting(retry_at=NOW + 1), {}) == []


def test_a_starting_session_without_a_retry_time_is_created_straight_away():
    assert run(starting(retry_at=None), {}) == [Create("s1")]


def test_a_starting_session_whose_recorded_instance_vanished_fails_as_vanished_before_start():
    assert run(starting(driver_ref="pod-1"), {}) == [Fail("s1", Reason.of("session.vanished_before_start"))]


def test_a_starting_session_with_a_recorded_instance_is_not_failed_when_the_driver_could_not_be_read():
    assert run(starting(driver_ref="pod-1"), None) == []


def test_a_starting_session_due_for_retry_is_created_even_when_the_driver_could_not_be_read():
    assert run(starting(retry_at=NOW - 1), None) == [Create("s1")]


def test_a_starting_session_not_yet_due_for_retry_is_not_created_when_the_driver_could_not_be_read():
    assert run(starting(retry_at=NOW + 60), None) == []


# -- starting: an instance --------------------------------------------------------------------


def test_a_starting_session_binds_the_observed_ref_when_the_ledger_has_none():
    actions = run(starting(reason=Reason.of("session.starting")), instance(ref="pod-1"))
    assert actions == [Bind("s1", "pod-1")]


def test_a_starting_session_binds_the_observed_ref_when_it_differs_from_the_ledgers():
    actions = run(starting(driver_ref="pod-old", reason=Reason.of("session.starting")), instance(ref="pod-new"))
    assert actions == [Bind("s1", "pod-new")]


def test_a_starting_session_is_not_bound_again_when_the_ref_is_already_recorded():
    actions = run(starting(driver_ref="pod-1", reason=Reason.of("session.starting")), instance(ref="pod-1"))
    assert actions == []


def test_a_starting_session_is_not_bound_when_the_driver_reports_no_ref():
    actions = run(starting(driver_ref="pod-1", reason=Reason.of("session.starting")), instance(ref=""))
    assert actions == []


def test_a_starting_session_whose_instance_runs_becomes_running_with_its_access_url():
    actions = run(starting(driver_ref="pod-1"), instance("running", ref="pod-1", access_url="https://lab/s1/"))
    assert actions == [Running("s1", "https://lab/s1/")]


def test_a_starting_session_whose_instance_failed_fails_with_the_drivers_reason():
    pull = Reason.of("driver.image_pull_failed", detail="no such image")
    actions = run(starting(driver_ref="pod-1"), instance("failed", ref="pod-1", reason=pull))
    assert actions == [Fail("s1", pull)]


def test_a_starting_session_whose_instance_failed_silently_fails_as_vanished_before_start():
    actions = run(starting(driver_ref="pod-1"), instance("failed", ref="pod-1"))
    assert actions == [Fail("s1", Reason.of("session.vanished_before_start"))]


def test_the_platforms_own_words_in_the_drivers_reason_are_cut_to_300_characters():
    def exited(output: str) -> Reason:
        return Reason.of("driver.with_output", reason=Reason.of("driver.jupyterlab_exit_code", exit_code=1), output=output)

    actions = run(starting(driver_ref="pod-1"), instance("failed", ref="pod-1", reason=exited("x" * 1000)))
    assert actions == [Fail("s1", exited("x" * 300))]
    said = instance("failed", ref="pod-1", reason=Reason.of("session.driver", message="y" * 1000))
    assert run(running(), said) == [Fail("s1", Reason.of("session.driver", message="y" * 300))]


def test_a_starting_session_whose_instance_is_being_deleted_fails_as_vanished_before_start():
    actions = run(starting(driver_ref="pod-1"), instance("running", ref="pod-1", deleting=True))
    assert actions == [Fail("s1", Reason.of("session.vanished_before_start"))]


def test_a_pending_instance_notes_the_drivers_progress_when_it_differs_from_the_stored_reason():
    progress = Reason.of("driver.starting_container")
    actions = run(starting(driver_ref="pod-1", reason=Reason.of("session.requesting")), instance(ref="pod-1", reason=progress))
    assert actions == [Note("s1", progress)]


def test_a_pending_instance_without_a_reason_notes_that_the_session_is_starting():
    actions = run(starting(driver_ref="pod-1", reason=Reason.of("session.requesting")), instance(ref="pod-1"))
    assert actions == [Note("s1", Reason.of("session.starting"))]


def test_a_pending_instance_notes_nothing_when_the_progress_is_already_stored():
    stored = Reason.of("driver.waiting_for_npu", detail="0/1 nodes are available")
    assert run(starting(driver_ref="pod-1", reason=stored), instance(ref="pod-1", reason=stored)) == []


def test_a_pending_instance_past_the_spawn_deadline_fails_with_spawn_timeout():
    late = Desired("s1", SessionState.STARTING, driver_ref="pod-1", started_at=NOW - 301)
    assert run(late, instance(ref="pod-1")) == [Fail("s1", Reason.of("session.spawn_timeout", seconds=300))]


def test_a_pending_instance_exactly_at_the_spawn_deadline_is_not_failed_yet():
    on_time = Desired("s1", SessionState.STARTING, driver_ref="pod-1", started_at=NOW - 300, reason=Reason.of("session.starting"))
    assert run(on_time, instance(ref="pod-1")) == []


def test_a_running_instance_is_never_failed_for_the_spawn_deadline():
    late = Desired("s1", SessionState.STARTING, driver_ref="pod-1", started_at=NOW - 10_000)
    assert run(late, instance("running", ref="pod-1", access_url="https://lab/s1/")) == [Running("s1", "https://lab/s1/")]


def test_a_failed_instance_past_the_spawn_deadline_fails_with_the_drivers_reason_not_the_timeout():
    late = Desired("s1", SessionState.STARTING, driver_ref="pod-1", started_at=NOW - 10_000)
    oom = Reason.of("driver.lab_stopped", cause=Reason.of("driver.container_exit", reason="OOMKilled", exit_code=137))
    actions = run(late, instance("failed", ref="pod-1", reason=oom))
    assert actions == [Fail("s1", oom)]


# -- starting: restarts (the CCE FlexNPU guide: a pod may restart briefly in a batch creation) ------

ERROR_EXIT = Reason.of("driver.container_exit", reason="Error", exit_code=1)
OOM_EXIT = Reason.of("driver.container_exit", reason="OOMKilled", exit_code=137)


def test_a_starting_instance_that_restarted_once_is_noted_as_restarting_not_failed():
    actions = run(starting(driver_ref="pod-1"), instance(ref="pod-1", restarts=1, last_exit=ERROR_EXIT))

    assert actions == [Note("s1", Reason.of("session.start_restarting", restart=1, limit=3))]
    assert str(actions[0].reason) == "restarting while the NPU initialises (1 of 3)"


def test_a_starting_instance_at_the_restart_bound_is_still_only_noted():
    actions = run(starting(driver_ref="pod-1"), instance(ref="pod-1", restarts=3, last_exit=ERROR_EXIT))
    assert actions == [Note("s1", Reason.of("session.start_restarting", restart=3, limit=3))]


def test_a_restarting_instance_notes_nothing_when_its_restart_is_already_stored():
    noted = starting(driver_ref="pod-1", reason=Reason.of("session.start_restarting", restart=2, limit=3))
    assert run(noted, instance(ref="pod-1", restarts=2, last_exit=ERROR_EXIT)) == []


def test_a_starting_instance_past_the_restart_bound_fails_with_how_it_last_ended():
    actions = run(starting(driver_ref="pod-1"), instance(ref="pod-1", restarts=4, last_exit=OOM_EXIT))

    assert actions == [Fail("s1", Reason.of("session.start_restarts_exceeded", restarts=4, limit=3, cause=OOM_EXIT))]
    assert str(actions[0].reason) == (
        "the lab kept restarting while starting (restart 4, 3 allowed); it last ended with OOMKilled, exit code 137"
    )


def test_with_no_restarts_allowed_the_first_restart_fails_the_start():
    actions = decide(
        [starting(driver_ref="pod-1")],
        {"s1": instance(ref="pod-1", restarts=1, last_exit=ERROR_EXIT)},
        now=NOW,
        timing=Timing(start_restarts=0),
    )
    assert actions == [Fail("s1", Reason.of("session.start_restarts_exceeded", restarts=1, limit=0, cause=ERROR_EXIT))]


def test_past_the_restart_bound_without_a_known_end_the_drivers_reason_is_the_cause():
    waiting = Reason.of("driver.waiting_for_answer")
    actions = run(starting(driver_ref="pod-1"), instance(ref="pod-1", restarts=5, reason=waiting))
    assert actions == [Fail("s1", Reason.of("session.start_restarts_exceeded", restarts=5, limit=3, cause=waiting))]


def test_a_restarting_instance_past_the_spawn_deadline_fails_with_spawn_timeout():
    late = Desired("s1", SessionState.STARTING, driver_ref="pod-1", started_at=NOW - 301)
    actions = run(late, instance(ref="pod-1", restarts=1, last_exit=ERROR_EXIT))
    assert actions == [Fail("s1", Reason.of("session.spawn_timeout", seconds=300))]


def test_an_instance_that_came_up_after_restarts_runs_with_them_recorded_even_past_the_bound():
    up = instance("running", ref="pod-1", access_url="https://lab/s1/", restarts=5, last_exit=ERROR_EXIT)
    assert run(starting(driver_ref="pod-1"), up) == [Running("s1", "https://lab/s1/", 5)]


@pytest.mark.parametrize("start_restarts", [-1, True, 1.5])
def test_a_restart_bound_that_is_not_a_non_negative_int_is_refused(start_restarts):
    with pytest.raises(ValueError, match="start_restarts must be a non-negative int"):
        Timing(start_restarts=start_restarts)


# -- running ------------------------------------------------------------------------------------


def test_a_running_session_with_a_healthy_instance_needs_nothing():
    assert run(running(), instance("running", ref="pod-1")) == []


def test_a_running_session_whose_instance_vanished_fails_as_vanished():
    assert run(running(), {}) == [Fail("s1", Reason.of("session.vanished"))]


def test_a_running_session_whose_instance_is_being_deleted_fails_as_vanished():
    assert run(running(), instance("running", ref="pod-1", deleting=True)) == [Fail("s1", Reason.of("session.vanished"))]


def test_a_running_session_taken_away_from_a_lost_node_fails_saying_so():
    lost = Reason.of("driver.node_lost", node="npu-3")
    actions = run(running(), instance("failed", ref="pod-1", deleting=True, reason=lost))
    assert actions == [Fail("s1", lost)]
    # Any other deletion the session did not ask for is "vanished", whatever the driver says.
    stopping = Reason.of("driver.being_stopped")
    assert run(running(), instance("failed", ref="pod-1", deleting=True, reason=stopping)) == [
        Fail("s1", Reason.of("session.vanished"))
    ]


def test_a_running_session_whose_instance_failed_fails_with_the_drivers_reason():
    actions = run(running(), instance("failed", ref="pod-1", reason=Reason.of("session.driver", message="node lost")))
    assert actions == [Fail("s1", Reason.of("session.driver", message="node lost"))]


def test_a_running_session_whose_instance_failed_silently_fails_as_vanished():
    assert run(running(), instance("failed", ref="pod-1")) == [Fail("s1", Reason.of("session.vanished"))]


def test_a_running_session_past_its_maximum_length_expires_with_its_lifetime():
    actions = run(running(expires_at=NOW, lifetime_minutes=90), instance("running", ref="pod-1"))
    assert actions == [Expire("s1", 90)]


def test_a_running_session_before_its_maximum_length_does_not_expire():
    assert run(running(expires_at=NOW + 1, lifetime_minutes=90), instance("running", ref="pod-1")) == []


def test_a_running_session_without_a_maximum_length_never_expires():
    assert run(running(expires_at=None), instance("running", ref="pod-1")) == []


def test_a_running_session_past_its_maximum_length_whose_instance_vanished_fails_rather_than_expires():
    assert run(running(expires_at=NOW - 1, lifetime_minutes=90), {}) == [Fail("s1", Reason.of("session.vanished"))]


def test_a_running_session_past_its_maximum_length_whose_instance_failed_fails_rather_than_expires():
    lost = instance("failed", ref="pod-1", reason=Reason.of("session.driver", message="node lost"))
    actions = run(running(expires_at=NOW - 1, lifetime_minutes=90), lost)
    assert actions == [Fail("s1", Reason.of("session.driver", message="node lost"))]


@pytest.mark.parametrize("phase", ["pending", "running"])
def test_a_running_lab_that_restarted_says_why_and_keeps_running(phase):
    actions = run(running(), instance(phase, ref="pod-1", restarts=1, last_exit=OOM_EXIT))

    assert actions == [Restarted("s1", 1, Reason.of("session.restarted", cause=OOM_EXIT, restarts=1))]
    assert str(actions[0].reason) == "the lab restarted after OOMKilled, exit code 137 (restart 1)"


def test_a_running_lab_that_restarted_without_a_known_end_says_it_restarted():
    actions = run(running(restarts=1), instance("running", ref="pod-1", restarts=2))
    assert actions == [Restarted("s1", 2, Reason.of("session.restarted_unknown", restarts=2))]


def test_a_running_lab_whose_restarts_are_recorded_needs_nothing():
    assert run(running(restarts=2), instance("running", ref="pod-1", restarts=2, last_exit=OOM_EXIT)) == []


def test_the_restarts_a_lab_took_while_starting_are_not_reported_once_it_runs():
    session = starting(driver_ref="pod-1")
    up = instance("running", ref="pod-1", access_url="https://lab/s1/", restarts=1, last_exit=ERROR_EXIT)
    [came_up] = run(session, up)

    assert run(running(restarts=came_up.restarts), up) == []


def test_a_running_lab_past_its_maximum_length_expires_rather_than_reports_a_restart():
    actions = run(running(expires_at=NOW), instance("pending", ref="pod-1", restarts=1, last_exit=OOM_EXIT))
    assert actions == [Expire("s1", 0)]


def test_a_running_session_is_left_alone_when_the_driver_could_not_be_read():
    assert run(running(expires_at=NOW - 1, lifetime_minutes=90), None) == []


# -- stopping -----------------------------------------------------------------------------------


def test_a_stopping_session_whose_instance_is_gone_finishes():
    assert run(stopping(), {}) == [Finish("s1")]


def test_a_stopping_session_whose_instance_is_still_there_is_deleted():
    assert run(stopping(), instance("running", ref="pod-1")) == [Delete("s1")]


def test_a_stopping_session_whose_instance_is_being_deleted_within_the_stop_timeout_waits():
    assert run(stopping(), instance("running", ref="pod-1", deleting=True)) == []


def test_a_stopping_session_whose_instance_is_being_deleted_past_the_stop_timeout_is_deleted_again():
    lingering = Desired("s1", SessionState.STOPPING, driver_ref="pod-1", stopping_at=NOW - 121)
    assert run(lingering, instance("running", ref="pod-1", deleting=True)) == [Delete("s1")]


def test_a_stopping_session_whose_instance_was_never_recorded_records_it_as_it_deletes_it():
    lost = Desired("s1", SessionState.STOPPING, stopping_at=NOW - 10)
    assert run(lost, instance("running", ref="pod-1")) == [Bind("s1", "pod-1"), Delete("s1")]
    assert run(lost, instance("running", ref="pod-1", deleting=True)) == [Bind("s1", "pod-1")]


def test_a_stopping_session_keeps_the_instance_it_recorded():
    assert run(stopping(), instance("running", ref="pod-2")) == [Delete("s1")]


def test_a_stopping_session_is_not_finished_when_the_driver_could_not_be_read():
    assert run(stopping(), None) == []


# -- orphans ------------------------------------------------------------------------------------


def test_an_instance_that_no_open_session_owns_is_deleted_as_an_orphan():
    assert run([], Seen("ghost", "running", ref="pod-9")) == [Delete("ghost", orphan=True)]


def test_an_orphan_already_being_deleted_is_left_alone():
    assert run([], Seen("ghost", "running", ref="pod-9", deleting=True)) == []


def test_orphans_are_deleted_in_session_id_order_after_the_ledgers_actions():
    seen = {"zz": Seen("zz", "running"), "aa": Seen("aa", "pending")}
    assert run(Desired("s1", SessionState.ADMITTED), seen) == [Create("s1"), Delete("aa", orphan=True), Delete("zz", orphan=True)]


def test_no_orphan_is_deleted_when_the_driver_could_not_be_read():
    assert decide([], None, now=NOW, timing=TIMING) == []


# -- cards --------------------------------------------------------------------------------------


def test_an_instance_on_another_card_is_rebound_to_the_card_the_node_reports():
    session = running(node="n1", card_index=0)
    assert run(session, instance("running", ref="pod-1", node="n1", card_index=3)) == [Rebind("s1", "n1", 3)]


def test_an_instance_on_another_node_is_rebound_to_that_node():
    session = running(node="n1", card_index=0)
    assert run(session, instance("running", ref="pod-1", node="n2", card_index=0)) == [Rebind("s1", "n2", 0)]


def test_an_instance_that_reports_no_node_is_rebound_on_the_ledgers_node():
    session = running(node="n1", card_index=0)
    assert run(session, instance("running", ref="pod-1", node="", card_index=2)) == [Rebind("s1", "n1", 2)]


def test_an_instance_on_the_ledgers_card_is_not_rebound():
    session = running(node="n1", card_index=0)
    assert run(session, instance("running", ref="pod-1", node="n1", card_index=0)) == []


def test_an_instance_whose_platform_reports_no_card_is_not_rebound():
    session = running(node="n1", card_index=0)
    assert run(session, instance("running", ref="pod-1", node="n2", card_index=None)) == []


def test_a_rebind_comes_before_the_sessions_other_action():
    session = stopping(node="n1", card_index=0)
    assert run(session, instance("running", ref="pod-1", node="n1", card_index=1)) == [Rebind("s1", "n1", 1), Delete("s1")]


# -- properties ---------------------------------------------------------------------------------

LEDGER_IDS = [f"s{i}" for i in range(6)]
OTHER_IDS = ["o1", "o2", "o3"]
OPEN_STATES = [SessionState.ADMITTED, SessionState.STARTING, SessionState.RUNNING, SessionState.STOPPING]
REASONS = [None, Reason.of("session.starting"), Reason.of("session.requesting"), Reason.of("session.driver", message="pulling")]
DRIVER_REASONS = [None, Reason.of("driver.starting_container"), Reason.of("session.driver", message="OOMKilled")]
# The actions that move a session along its life: at most one of them per session per pass.
LIFECYCLE = (Create, Running, Fail, Note, Finish, Expire, Delete, Restarted)

times = st.one_of(st.none(), st.floats(min_value=NOW - 1_000, max_value=NOW + 1_000, allow_nan=False))
refs = st.sampled_from(["", "pod-a", "pod-b"])
nodes = st.sampled_from(["", "n1", "n2"])
cards = st.one_of(st.none(), st.integers(min_value=0, max_value=3))


@st.composite
def desired(draw, session_id: str) -> Desired:
    return Desired(
        session_id,
        draw(st.sampled_from(OPEN_STATES)),
        driver_ref=draw(refs),
        reason=draw(st.sampled_from(REASONS)),
        started_at=draw(times),
        stopping_at=draw(times),
        create_attempts=draw(st.integers(min_value=0, max_value=5)),
        retry_at=draw(times),
        node=draw(nodes),
        card_index=draw(cards),
        expires_at=draw(times),
        lifetime_minutes=draw(st.integers(min_value=0, max_value=240)),
        restarts=draw(st.integers(min_value=0, max_value=5)),
    )


@st.composite
def seen_instance(draw, session_id: str) -> Seen:
    return Seen(
        session_id,
        draw(st.sampled_from(["pending", "running", "failed"])),
        ref=draw(refs),
        reason=draw(st.sampled_from(DRIVER_REASONS)),
        access_url=draw(st.sampled_from(["", "https://lab/x/"])),
        node=draw(nodes),
        card_index=draw(cards),
        deleting=draw(st.booleans()),
        restarts=draw(st.integers(min_value=0, max_value=5)),
        last_exit=draw(st.sampled_from([None, Reason.of("driver.container_exit", reason="OOMKilled", exit_code=137)])),
    )


@st.composite
def worlds(draw) -> tuple[list[Desired], dict[str, Seen] | None]:
    ids = draw(st.lists(st.sampled_from(LEDGER_IDS), unique=True, max_size=len(LEDGER_IDS)))
    sessions = [draw(desired(sid)) for sid in ids]
    if draw(st.booleans()) and draw(st.booleans()):
        return sessions, None
    seen_ids = draw(st.lists(st.sampled_from(LEDGER_IDS + OTHER_IDS), unique=True))
    return sessions, {sid: draw(seen_instance(sid)) for sid in seen_ids}


@settings(max_examples=500, deadline=None)
@given(world=worlds(), now=st.floats(min_value=NOW - 1_000, max_value=NOW + 1_000, allow_nan=False))
def test_decide_is_deterministic_consistent_and_concludes_nothing_from_an_unobserved_cluster(world, now):
    sessions, seen = world
    actions = decide(sessions, seen, now=now, timing=TIMING)

    assert decide(list(sessions), None if seen is None else dict(seen), now=now, timing=TIMING) == actions

    ledger = {s.session_id for s in sessions}
    lifecycle = Counter(a.session_id for a in actions if isinstance(a, LIFECYCLE) and not (isinstance(a, Delete) and a.orphan))
    assert all(count == 1 for count in lifecycle.values()), actions
    assert all(count == 1 for count in Counter(a.session_id for a in actions if isinstance(a, Bind)).values()), actions
    assert all(count == 1 for count in Counter(a.session_id for a in actions if isinstance(a, Rebind)).values()), actions

    for action in actions:
        if isinstance(action, Delete) and action.orphan:
            assert seen is not None and action.session_id not in ledger and action.session_id in seen
            assert not seen[action.session_id].deleting
        else:
            assert action.session_id in ledger, action
        if isinstance(action, Finish):
            assert seen is not None and action.session_id not in seen
        if isinstance(action, Restarted):  # only a running lab's restart the ledger has not recorded yet
            session = next(s for s in sessions if s.session_id == action.session_id)
            assert session.state == SessionState.RUNNING
            assert seen is not None and seen[action.session_id].restarts == action.restarts > session.restarts

    if seen is None:
        assert all(isinstance(a, Create) for a in actions), actions
        assert not any(isinstance(a, Finish | Fail | Delete) for a in actions)


# -- a node restart (the CCE FlexNPU guide: after an unexpected restart, NPU pods may show failed
# -- while the NPUs are reported late; normal, to be ignored) ------------------------------------

REBOOT = NodeReboot(at=NOW - 20)
REBOOT_BACK = NodeReboot(at=NOW - 20, devices_at=NOW - 5)
ADMISSION = Reason.of("session.driver", message="UnexpectedAdmissionError: Allocate failed")
WAIT = 300.0


def rebooted_run(session: Desired, seen: Seen | None, *, now: float = NOW, wait: float = WAIT) -> list:
    timing = Timing(spawn_timeout_seconds=300.0, stop_timeout_seconds=120.0, reboot_device_wait_seconds=wait)
    return decide([session], {} if seen is None else {seen.session_id: seen}, now=now, timing=timing)


def test_a_running_lab_failed_on_a_node_that_restarted_waits_for_the_npu_instead_of_failing():
    actions = rebooted_run(running(node_reboot=REBOOT), instance("failed", ref="pod-1", reason=ADMISSION))

    assert actions == [RebootWait("s1", SessionState.RUNNING, REBOOT.at, Reason.of("session.node_restart_waiting"))]
    assert str(actions[0].reason) == "waiting for the NPU to come back after a node restart"


def test_a_session_already_waiting_for_the_npu_is_not_noted_again():
    waiting = running(node_reboot=REBOOT, reboot_at=REBOOT.at, reason=Reason.of("session.node_restart_waiting"))

    assert rebooted_run(waiting, instance("failed", ref="pod-1", reason=ADMISSION)) == []


def test_a_starting_lab_failed_on_a_node_that_restarted_waits_too():
    caught = Desired("s1", SessionState.STARTING, driver_ref="pod-1", started_at=REBOOT.at - 5, node_reboot=REBOOT)

    actions = rebooted_run(caught, instance("failed", ref="pod-1", reason=ADMISSION))

    assert [type(a) for a in actions] == [RebootWait]


def test_once_the_node_reports_its_npus_a_lab_still_failed_is_relaunched_on_its_allocation():
    waiting = running(node_reboot=REBOOT_BACK, reboot_at=REBOOT.at, reason=Reason.of("session.node_restart_waiting"))

    assert rebooted_run(waiting, instance("failed", ref="pod-1", reason=ADMISSION)) == [Relaunch("s1", "pod-1", REBOOT.at)]


def test_a_lab_still_failed_right_after_the_npus_came_back_is_given_a_moment_to_come_back_itself():
    just_back = NodeReboot(at=NOW - 20, devices_at=NOW - 1)
    waiting = running(node_reboot=just_back, reboot_at=just_back.at, reason=Reason.of("session.node_restart_waiting"))

    assert rebooted_run(waiting, instance("failed", ref="pod-1", reason=ADMISSION)) == []


def test_a_relaunched_session_deletes_the_old_instance_and_creates_none_while_it_is_there():
    relaunched = starting(node_reboot=REBOOT_BACK, reboot_at=REBOOT.at, replaced_ref="pod-1")

    assert rebooted_run(relaunched, instance("failed", ref="pod-1", reason=ADMISSION)) == [Delete("s1")]
    assert rebooted_run(relaunched, instance("failed", ref="pod-1", deleting=True)) == []


def test_a_relaunched_session_creates_its_new_instance_once_the_old_one_is_gone():
    relaunched = starting(node_reboot=REBOOT_BACK, reboot_at=REBOOT.at, replaced_ref="pod-1")

    assert rebooted_run(relaunched, None) == [Create("s1")]


def test_a_relaunched_session_creates_nothing_when_the_cluster_could_not_be_read():
    relaunched = starting(node_reboot=REBOOT_BACK, reboot_at=REBOOT.at, replaced_ref="pod-1")

    assert decide([relaunched], None, now=NOW, timing=TIMING) == []


def test_a_relaunched_lab_that_comes_up_tells_the_student_the_node_restarted():
    relaunched = starting(driver_ref="pod-2", node_reboot=REBOOT_BACK, reboot_at=REBOOT.at, replaced_ref="pod-1")

    actions = rebooted_run(relaunched, instance("running", ref="pod-2", access_url="https://lab/"))

    assert actions == [Running("s1", "https://lab/", 0, Reason.of("session.node_restarted"))]
    assert str(actions[0].reason) == "the node restarted; your lab was restarted"


def test_a_lab_that_comes_back_by_itself_is_watched_again_and_the_student_told():
    waiting = running(node_reboot=REBOOT_BACK, reboot_at=REBOOT.at, reason=Reason.of("session.node_restart_waiting"))

    actions = rebooted_run(waiting, instance("running", ref="pod-1", restarts=1))

    assert actions == [Restarted("s1", 1, Reason.of("session.node_restarted"))]


def test_a_lab_caught_in_a_restart_fails_past_the_bound_when_the_npus_never_came_back():
    waiting = running(node_reboot=REBOOT, reboot_at=REBOOT.at, reason=Reason.of("session.node_restart_waiting"))

    actions = rebooted_run(waiting, instance("failed", ref="pod-1", reason=ADMISSION), now=REBOOT.at + WAIT + 1)

    assert actions == [Fail("s1", Reason.of("session.node_restart_no_npu", seconds=300))]
    assert str(actions[0].reason) == "the node restarted and its NPUs did not come back within 300 s"


def test_the_wait_is_counted_from_the_restart_with_the_clock_passed_in():
    failed = instance("failed", ref="pod-1", reason=ADMISSION)
    waiting = running(node_reboot=REBOOT, reboot_at=REBOOT.at, reason=Reason.of("session.node_restart_waiting"))

    assert rebooted_run(waiting, failed, now=REBOOT.at + 30, wait=30) == []
    assert [type(a) for a in rebooted_run(waiting, failed, now=REBOOT.at + 31, wait=30)] == [Fail]


def test_a_failure_long_after_a_restart_is_judged_as_any_failure():
    late = running(node_reboot=REBOOT, reboot_at=None)

    actions = rebooted_run(late, instance("failed", ref="pod-1", reason=ADMISSION), now=REBOOT.at + WAIT + 1)

    assert actions == [Fail("s1", ADMISSION)]


def test_a_session_started_after_the_restart_was_seen_is_not_concerned_by_it():
    fresh = Desired("s1", SessionState.STARTING, driver_ref="pod-9", started_at=REBOOT.at + 1, node_reboot=REBOOT)

    assert rebooted_run(fresh, instance("failed", ref="pod-9", reason=ADMISSION)) == [Fail("s1", ADMISSION)]


def test_without_a_node_restart_a_failed_running_lab_still_fails():
    assert rebooted_run(running(), instance("failed", ref="pod-1", reason=ADMISSION)) == [Fail("s1", ADMISSION)]


def test_timing_refuses_a_negative_reboot_wait():
    with pytest.raises(ValueError, match="reboot_device_wait_seconds"):
        Timing(reboot_device_wait_seconds=-1)


def test_a_lab_coming_back_by_itself_is_not_reported_as_an_ordinary_restart_while_it_starts():
    waiting = running(node_reboot=REBOOT_BACK, reboot_at=REBOOT.at, reason=Reason.of("session.node_restart_waiting"))

    assert rebooted_run(waiting, instance("pending", ref="pod-1", restarts=1)) == []
