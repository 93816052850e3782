"""Properties of the run state machine, checked over generated sequences, not hand-picked ones.

tests/test_states.py walks the paths people take; these tests throw arbitrary attempts at
`check_transition`. The run's control surface itself (pause, resume, approve, reject,
cancel, edits, duplicates, late commands) is driven against the real workflow, with hostile
model output, in tests/test_live_run_properties.py.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.core.states import (
    TERMINAL,
    TRANSITIONS,
    IllegalTransitionError,
    RunStatus,
    check_transition,
    is_terminal,
)

S = RunStatus
FAST = settings(max_examples=200, deadline=None, database=None)
statuses = st.sampled_from(list(RunStatus))


@FAST
@given(start=statuses, attempts=st.lists(statuses, max_size=40))
def test_random_attempts_only_ever_follow_written_transitions(start, attempts):
    current = start
    for target in attempts:
        before = current
        try:
            current = check_transition(current, target)
        except IllegalTransitionError as err:
            assert target not in TRANSITIONS[before]
            assert f"{before.value} -> {target.value}" in str(err)
        else:
            assert target in TRANSITIONS[before], f"{before} -> {target} was accepted"
        if is_terminal(before):
            assert current == before, "a terminal state never moves"


@FAST
@given(final=st.sampled_from(sorted(TERMINAL)), target=statuses)
def test_terminal_states_have_no_exits(final, target):
    with pytest.raises(IllegalTransitionError, match="illegal run transition"):
        check_transition(final, target)


def _reachable(start: RunStatus) -> set[RunStatus]:
    seen = {start}
    queue = deque([start])
    while queue:
        for nxt in TRANSITIONS[queue.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


@pytest.mark.parametrize("start", sorted(set(RunStatus) - TERMINAL))
def test_every_live_state_can_reach_every_ending(start):
    reachable = _reachable(start)
    missing = TERMINAL - reachable
    assert not missing, f"from {start.value} a run can never end as {sorted(missing)}"


def test_the_table_names_only_known_states():
    for source, targets in TRANSITIONS.items():
        assert isinstance(source, RunStatus) and targets <= set(RunStatus)
