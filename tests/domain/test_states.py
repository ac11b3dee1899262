import pytest

from labs.domain.states import (
    HOLDS_ALLOCATION,
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    SessionState,
    check_transition,
    sources_of,
)


def test_the_happy_path_is_allowed_step_by_step():
    path = ["queued", "admitted", "starting", "running", "stopping", "stopped"]
    for current, target in zip(path, path[1:], strict=False):
        check_transition(current, target)


def test_terminal_states_have_no_way_out():
    for state in TERMINAL:
        for target in SessionState:
            with pytest.raises(InvalidTransition):
                check_transition(state, target)


def test_a_session_that_may_own_an_instance_cannot_end_without_stopping():
    for state in (SessionState.STARTING, SessionState.RUNNING):
        for target in TERMINAL:
            with pytest.raises(InvalidTransition):
                check_transition(state, target)


def test_skipping_a_step_is_refused_with_a_readable_message():
    with pytest.raises(InvalidTransition, match="a queued session cannot become running"):
        check_transition("queued", "running")


def test_sources_of_inverts_the_table():
    for target in SessionState:
        assert sources_of(target) == {s for s, targets in TRANSITIONS.items() if target in targets}


def test_every_state_holding_an_allocation_can_reach_a_terminal_state():
    for state in HOLDS_ALLOCATION:
        seen, frontier = set(), [state]
        while frontier:
            current = frontier.pop()
            seen.add(current)
            frontier.extend(t for t in TRANSITIONS[current] if t not in seen)
        assert seen & TERMINAL
