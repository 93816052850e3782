"""What people may tell a run besides approvals: pause and resume, and its admission.

A component of AgentRunWorkflow, which keeps the update and signal handlers (approvals are in
agentledger.workflows.approvals). A pause takes effect at the run's next step boundary, never
inside a step; a pause or resume of a run that waits for a sub-agent's run goes on to that
run (agentledger.workflows.subagents). Validators refuse, with a reason a person can act on,
without changing anything; signals cannot be refused.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agentledger.workflows.recording import RunContext

with workflow.unsafe.imports_passed_through():
    from agentledger.core import bounds
    from agentledger.core.admission_models import AdmitInput
    from agentledger.core.events import EventType
    from agentledger.core.messages import Message, RunMessages
    from agentledger.core.results import ControlResult
    from agentledger.core.states import RunStatus, is_terminal
    from agentledger.core.wire import ControlInput


def check_control(input: ControlInput) -> None:
    """A pause or resume with a field over its maximum (agentledger.core.bounds) is refused
    before its `by` is recorded."""
    found = bounds.problems(input)
    if found:
        raise ApplicationError(f"refused: {'; '.join(found)}")


class RunControls:
    """Pause, resume and admission: what people and the admission queue tell a run."""

    def __init__(
        self,
        run: RunContext,
        forward_control: Callable[[Message, ControlInput], None],
    ) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        # A pause or resume goes on to the sub-agent run this run waits for (Subagents).
        self.forward_control = forward_control

    async def step_boundary(self) -> None:
        """Where a pause takes effect: between steps, never inside one."""
        if not self.progress.pause_requested:
            return
        self.recorder.set_status(RunStatus.PAUSED)
        self.recorder.event(EventType.RUN_PAUSED, data={"reason": self.progress.pause_reason})
        await self.recorder.flush()
        await workflow.wait_condition(lambda: not self.progress.pause_requested)
        self.progress.pause_reason = None
        self.recorder.event(EventType.RUN_RESUMED)

    async def pause_for_admin(self, reason: str) -> None:
        """A failure no retry can fix (a refused permission): wait for a person to resume."""
        self.progress.pause_requested, self.progress.pause_reason = True, reason
        self.recorder.event(EventType.RUN_NEEDS_ADMIN, data={"reason": reason})
        await self.step_boundary()

    def admit(self, input: AdmitInput) -> None:
        """The tenant's admission queue gives this run a slot: only the queue that holds it
        (the one its input names) may; an admit from another sender is ignored."""
        if input.admission_id != self.spec.admission:
            workflow.logger.warning(
                "run %s ignored an admit from %r: its slot is %r's to give",
                self.run_id,
                input.admission_id,
                self.spec.admission,
            )
            return
        self.progress.admitted = True

    def pause(self, input: ControlInput) -> ControlResult:
        self.progress.pause_requested = True
        self.progress.paused_by = input.by
        self.recorder.event(EventType.PAUSE_REQUESTED, data={"by": input.by})
        self.forward_control(RunMessages.PAUSE, input)
        idle = self.progress.status == RunStatus.WAITING_FOR_MESSAGE
        return ControlResult(
            status=self.progress.status,
            paused=True,
            message="the session pauses now, while it waits for a message; messages said "
            "meanwhile wait for the resume"
            if idle
            else "the run pauses at its next step boundary",
        )

    def validate_pause(self, input: ControlInput) -> None:
        check_control(input)
        if is_terminal(self.progress.status):
            raise ApplicationError(
                f"run {self.run_id} already ended as {self.progress.status.value}"
            )

    def resume(self, input: ControlInput) -> ControlResult:
        self.progress.pause_requested = False
        self.progress.paused_by = None
        self.recorder.event(EventType.RESUME_REQUESTED, data={"by": input.by})
        self.forward_control(RunMessages.RESUME, input)
        return ControlResult(status=self.progress.status, paused=False, message="the run continues")

    def validate_resume(self, input: ControlInput) -> None:
        check_control(input)
        if is_terminal(self.progress.status):
            raise ApplicationError(
                f"run {self.run_id} already ended as {self.progress.status.value}"
            )
        if not self.progress.pause_requested:
            raise ApplicationError(
                f"run {self.run_id} is not paused (status {self.progress.status.value})"
            )

    def pause_signal(self, input: ControlInput) -> None:
        if not is_terminal(self.progress.status):
            self.progress.pause_requested = True
            self.progress.paused_by = input.by
            self.forward_control(RunMessages.PAUSE, input)

    def resume_signal(self, input: ControlInput) -> None:
        self.progress.pause_requested = False
        self.progress.paused_by = None
        self.forward_control(RunMessages.RESUME, input)
