"""The run state machine: legal moves are written once; everything else is refused."""

from __future__ import annotations

import itertools

import pytest

from agentledger.core.states import (
    TERMINAL,
    TRANSITIONS,
    IllegalTransitionError,
    RunStatus,
    check_transition,
)

S = RunStatus


def test_every_status_has_its_transitions_written_down():
    assert set(TRANSITIONS) == set(RunStatus)
    for status in TERMINAL:
        assert TRANSITIONS[status] == frozenset(), f"{status} is final"


def test_the_approval_path_is_legal():
    path = [
        S.QUEUED,
        S.PLANNING,
        S.WAITING_FOR_TOOL,
        S.PLANNING,
        S.WAITING_FOR_APPROVAL,
        S.WAITING_FOR_TOOL,
        S.PLANNING,
        S.VERIFYING,
        S.COMPLETED,
    ]
    for current, new in itertools.pairwise(path):
        assert check_transition(current, new) == new


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (S.QUEUED, S.COMPLETED),
        (S.PLANNING, S.COMPLETED),  # never complete without verifying
        (S.WAITING_FOR_APPROVAL, S.COMPLETED),  # a decision never ends a run by itself
        (S.COMPLETED, S.PLANNING),
        (S.CANCELLED, S.PAUSED),
        (S.FAILED, S.COMPLETED),
    ],
)
def test_illegal_transitions_are_errors(current, new):
    with pytest.raises(IllegalTransitionError, match=f"{current.value} -> {new.value}"):
        check_transition(current, new)


def test_any_live_run_can_be_cancelled_and_no_ended_run_can():
    for status in RunStatus:
        assert (S.CANCELLED in TRANSITIONS[status]) == (status not in TERMINAL)


def test_a_session_paused_while_idle_returns_to_its_wait_or_ends():
    """A pause while a session waits for a message shows `paused`; resume returns it to the
    wait (or starts the turn said meanwhile), and `agentledger end` completes it from there."""
    for path in (
        [S.VERIFYING, S.WAITING_FOR_MESSAGE, S.PAUSED, S.WAITING_FOR_MESSAGE, S.COMPLETED],
        [S.WAITING_FOR_MESSAGE, S.PAUSED, S.PLANNING],
        [S.WAITING_FOR_MESSAGE, S.PAUSED, S.COMPLETED],
    ):
        for current, new in itertools.pairwise(path):
            assert check_transition(current, new) == new
