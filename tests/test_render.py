"""What `status` prints for a run, from its state."""

from __future__ import annotations

import pytest

from agentrun.cli import render
from agentrun.core.results import RunState
from agentrun.core.states import RunStatus


def state(status: RunStatus) -> RunState:
    return RunState(
        run_id="run-1",
        status=status,
        tenant="default",
        user="anonymous",
        task="Summarize the policy.",
        current_step_id=None,
        steps=[],
        pending_approval=None,
        pause_requested=True,
        checkpoint={},
        tokens_in=0,
        tokens_out=0,
        cost_usd=0.0,
        result=None,
        error=None,
    )


@pytest.mark.parametrize(
    ("status", "shown"),
    [(RunStatus.PLANNING, True), (RunStatus.FAILED, False), (RunStatus.COMPLETED, False)],
)
def test_a_pause_request_shows_only_while_the_run_can_still_pause(status, shown):
    first_line = render.run_state(state(status)).splitlines()[0]
    assert ("(pause requested)" in first_line) is shown, first_line
