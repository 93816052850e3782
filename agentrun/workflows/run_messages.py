"""What people may ask a run or tell it besides approvals: its state, pause and resume.

A pause or resume of a run that waits for a sub-agent's run goes on to that run
(agentrun/workflows/subagents.py).

Mixed into AgentRunWorkflow (approvals are in agentrun/workflows/approvals.py). Validators refuse,
with a reason a person can act on, without changing anything; signals cannot be refused.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agentrun.workflows import run_state
from agentrun.workflows.recording import Recording

with workflow.unsafe.imports_passed_through():
    from agentrun.core import bounds
    from agentrun.core import constants as names
    from agentrun.core._wire import ControlInput
    from agentrun.core.admission_models import AdmitInput
    from agentrun.core.results import ControlResult, RunState
    from agentrun.core.states import RunStatus, is_terminal


def check_control(input: ControlInput) -> None:
    """A pause or resume with a field over its maximum (agentrun.core.bounds) is refused
    before its `by` is recorded."""
    found = bounds.problems(input)
    if found:
        raise ApplicationError(f"refused: {'; '.join(found)}")


class RunMessages(Recording):
    @workflow.query(name=names.QUERY_STATE)
    def state(self) -> RunState:
        return run_state.state_view(self.run_id, self.spec, self.progress, self._priority())

    @workflow.signal(name=names.SIGNAL_RUN_ADMIT)
    def admit_signal(self, input: AdmitInput) -> None:
        """The tenant's admission queue gives this run a slot: only the queue that holds it
        (the one its input names) may; an admit from another sender is ignored."""
        if self.changes.generation_4 and input.admission_id != self.spec.admission:
            workflow.logger.warning(
                "run %s ignored an admit from %r: its slot is %r's to give",
                self.run_id,
                input.admission_id,
                self.spec.admission,
            )
            return
        self.progress.admitted = True

    @workflow.update(name=names.UPDATE_PAUSE)
    def pause(self, input: ControlInput) -> ControlResult:
        self.progress.pause_requested = True
        self.progress.paused_by = input.by
        self._event("pause.requested", data={"by": input.by})
        self._forward_control(names.SIGNAL_PAUSE, input)
        idle = self.progress.status == RunStatus.WAITING_FOR_MESSAGE
        return ControlResult(
            status=self.progress.status,
            paused=True,
            message="the session pauses now, while it waits for a message; messages said "
            "meanwhile wait for the resume"
            if idle
            else "the run pauses at its next step boundary",
        )

    @pause.validator
    def _validate_pause(self, input: ControlInput) -> None:
        check_control(input)
        if is_terminal(self.progress.status):
            raise ApplicationError(
                f"run {self.run_id} already ended as {self.progress.status.value}"
            )

    @workflow.update(name=names.UPDATE_RESUME)
    def resume(self, input: ControlInput) -> ControlResult:
        self.progress.pause_requested = False
        self.progress.paused_by = None
        self._event("resume.requested", data={"by": input.by})
        self._forward_control(names.SIGNAL_RESUME, input)
        return ControlResult(status=self.progress.status, paused=False, message="the run continues")

    @resume.validator
    def _validate_resume(self, input: ControlInput) -> None:
        check_control(input)
        if is_terminal(self.progress.status):
            raise ApplicationError(
                f"run {self.run_id} already ended as {self.progress.status.value}"
            )
        if not self.progress.pause_requested:
            raise ApplicationError(
                f"run {self.run_id} is not paused (status {self.progress.status.value})"
            )

    @workflow.signal(name=names.SIGNAL_PAUSE)
    def pause_signal(self, input: ControlInput) -> None:
        if not is_terminal(self.progress.status):
            self.progress.pause_requested = True
            self.progress.paused_by = input.by
            self._forward_control(names.SIGNAL_PAUSE, input)

    @workflow.signal(name=names.SIGNAL_RESUME)
    def resume_signal(self, input: ControlInput) -> None:
        self.progress.pause_requested = False
        self.progress.paused_by = None
        self._forward_control(names.SIGNAL_RESUME, input)
