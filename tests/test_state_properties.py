"""Properties of the run state machine, checked over generated sequences, not hand-picked ones.

tests/test_states.py walks the paths people take; these tests throw arbitrary attempts at
`check_transition` and model the run's control surface (pause, resume, approve, reject,
cancel, step) to show no sequence of requests can reach a state the table does not allow.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from agentrun.core.states import (
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


# ---------------------------------------------------------------- the control surface

WORKING = (S.PLANNING, S.WAITING_FOR_TOOL, S.WAITING_FOR_APPROVAL, S.VERIFYING)
# Where the agent loop may go next from each working state: our reading of the design.
NEXT_STEP = {
    S.QUEUED: (S.PLANNING,),
    S.PLANNING: (S.WAITING_FOR_TOOL, S.WAITING_FOR_APPROVAL, S.VERIFYING),
    S.WAITING_FOR_TOOL: (S.PLANNING, S.WAITING_FOR_TOOL, S.WAITING_FOR_APPROVAL, S.VERIFYING),
    S.VERIFYING: (S.COMPLETED, S.PLANNING),
}


class RunControls(RuleBasedStateMachine):
    """A run driven by people and by its own loop; each move goes through check_transition.

    Rules fire only when the model says the request is legal; an illegal request is asserted
    to be refused without changing anything.
    """

    @initialize()
    def queued(self) -> None:
        self.status = S.QUEUED
        self.paused_from: RunStatus | None = None
        self.history: list[RunStatus] = [S.QUEUED]

    def move(self, new: RunStatus) -> None:
        self.status = check_transition(self.status, new)
        self.history.append(self.status)

    def refused(self, new: RunStatus) -> None:
        before = list(self.history)
        with pytest.raises(IllegalTransitionError):
            self.move(new)
        assert self.history == before

    @property
    def live(self) -> bool:
        return not is_terminal(self.status)

    @precondition(lambda self: self.status in NEXT_STEP)
    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        self.move(data.draw(st.sampled_from(NEXT_STEP[self.status])))

    @precondition(lambda self: self.live and self.status != S.PAUSED)
    @rule()
    def pause(self) -> None:
        self.paused_from = self.status
        self.move(S.PAUSED)

    @precondition(lambda self: self.status == S.PAUSED)
    @rule()
    def resume(self) -> None:
        # A run paused before its first step starts planning; others go back where they were.
        back = self.paused_from if self.paused_from in WORKING else S.PLANNING
        self.move(back)

    @precondition(lambda self: self.status == S.WAITING_FOR_APPROVAL)
    @rule()
    def approve(self) -> None:
        self.move(S.WAITING_FOR_TOOL)

    @precondition(lambda self: self.status == S.WAITING_FOR_APPROVAL)
    @rule(replan=st.booleans())
    def reject(self, replan: bool) -> None:
        self.move(S.PLANNING if replan else S.CANCELLED)

    @precondition(lambda self: self.live)
    @rule()
    def cancel(self) -> None:
        self.move(S.CANCELLED)

    @precondition(lambda self: self.live)
    @rule()
    def fail(self) -> None:
        self.move(S.FAILED)

    @precondition(lambda self: self.status != S.WAITING_FOR_APPROVAL)
    @rule(replan=st.booleans())
    def decide_with_nothing_pending(self, replan: bool) -> None:
        # Approving or rejecting when no approval waits is refused by the table, except where
        # the target happens to be a legal move anyway (e.g. planning -> waiting_for_tool).
        for target in (S.WAITING_FOR_TOOL, S.PLANNING if replan else S.CANCELLED):
            if target not in TRANSITIONS[self.status]:
                self.refused(target)

    @precondition(lambda self: not self.live)
    @rule(attempt=statuses)
    def anything_after_the_end(self, attempt: RunStatus) -> None:
        self.refused(attempt)

    @invariant()
    def at_most_one_ending_and_it_is_last(self) -> None:
        endings = [s for s in self.history if s in TERMINAL]
        assert len(endings) <= 1, f"two endings: {endings}"
        if endings:
            assert self.history[-1] == endings[0]

    @invariant()
    def every_recorded_move_is_written_down(self) -> None:
        for before, after in zip(self.history, self.history[1:], strict=False):
            assert after in TRANSITIONS[before]

    @invariant()
    def an_ended_run_accepts_nothing(self) -> None:
        if not self.live:
            assert TRANSITIONS[self.status] == frozenset()


RunControls.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, database=None
)
test_run_controls = RunControls.TestCase
