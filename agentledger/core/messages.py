"""What people send a workflow, each intent named once, as one typed message.

An intent is one update a worker answers: its validator refuses at once, with a reason,
what does not fit, and the caller hears the outcome. Where a caller must not wait for a
worker (a decision, a pause, a message sent while none runs must still be kept), the same
intent also has a signal: the server keeps it in the workflow's history, and the next worker
applies it with the same checks, recording what it refuses (a signal cannot answer). A
message is the two names, the input each carries and what the update answers.

The client sends a `Message` (agentledger.client.handles), never a name; each workflow
registers one update per intent and one handler for every kept signal, routed by these
tables (agentledger.workflows.agent_run, backlog.py), so the two sides cannot name an
intent differently. The names are the deployed contract: never renamed
(agentledger.core.constants).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from agentledger.core import constants as names
from agentledger.core.backlog_models import (
    BacklogControlResult,
    BacklogControlSignal,
    EnqueueInput,
    EnqueueResult,
    RetryInput,
    RetryResult,
)
from agentledger.core.results import ControlResult, DecisionResult
from agentledger.core.wire import ApproveInput, ControlInput, RejectInput, SayInput


@dataclass(frozen=True)
class Message:
    """One intent: what a person calls it (`noun`, as answers say it: "the pause went as
    a signal"), the update a worker answers (None: the intent is only ever kept), the signal
    the server keeps while no worker runs (None: the caller always waits), the input the
    update takes, the input the signal carries (the update's, unless the kept form needs
    more, such as a request id to read its outcome by) and what the update answers."""

    noun: str
    update: str | None
    signal: str | None
    input: type[BaseModel]
    result: type[BaseModel] | None
    kept_input: type[BaseModel] | None = None

    @property
    def kept_as(self) -> type[BaseModel]:
        """The input the kept signal carries."""
        return self.kept_input or self.input

    @property
    def kept_signal(self) -> str:
        """The name of the kept signal (an intent every caller waits for has none)."""
        if self.signal is None:
            raise ValueError(f"a {self.noun} is never kept: send its update")
        return self.signal

    @property
    def update_name(self) -> str:
        """The name of the update (an intent that is only ever kept has none)."""
        if self.update is None:
            raise ValueError(f"a {self.noun} is only ever kept: send its signal")
        return self.update


class MessageTable:
    """A workflow's messages, and the intent a kept signal's name stands for."""

    def __init__(self, *messages: Message) -> None:
        self.messages = messages
        self._by_signal = {m.signal: m for m in messages if m.signal is not None}

    def kept(self, signal: str) -> Message | None:
        """The intent whose kept form is signal `signal` (None: no intent of this table)."""
        return self._by_signal.get(signal)


class RunMessages:
    """What people tell a run (AgentRunWorkflow)."""

    PAUSE = Message("pause", names.UPDATE_PAUSE, names.SIGNAL_PAUSE, ControlInput, ControlResult)
    RESUME = Message(
        "resume", names.UPDATE_RESUME, names.SIGNAL_RESUME, ControlInput, ControlResult
    )
    APPROVE = Message(
        "decision", names.UPDATE_APPROVE, names.SIGNAL_APPROVE, ApproveInput, DecisionResult
    )
    REJECT = Message(
        "decision", names.UPDATE_REJECT, names.SIGNAL_REJECT, RejectInput, DecisionResult
    )
    END_SESSION = Message(
        "end", names.UPDATE_END_SESSION, names.SIGNAL_END_SESSION, ControlInput, ControlResult
    )
    # A message to a run in flight is kept whatever happens and taken at the run's next
    # model call: the caller reads when it was taken from the run's state.
    SAY = Message("message", None, names.SIGNAL_SAY, SayInput, None)

    TABLE = MessageTable(PAUSE, RESUME, APPROVE, REJECT, END_SESSION, SAY)


class BacklogMessages:
    """What people tell an agent's backlog (AgentBacklogWorkflow). Each kept form carries a
    request id, whose outcome the sender reads with the backlog's delivery query."""

    ENQUEUE = Message(
        "enqueue",
        names.UPDATE_BACKLOG_ENQUEUE,
        names.SIGNAL_BACKLOG_ENQUEUE,
        EnqueueInput,
        EnqueueResult,
    )
    STOP = Message(
        "stop",
        names.UPDATE_BACKLOG_STOP,
        names.SIGNAL_BACKLOG_STOP,
        ControlInput,
        BacklogControlResult,
        kept_input=BacklogControlSignal,
    )
    RESUME = Message(
        "resume",
        names.UPDATE_BACKLOG_RESUME,
        names.SIGNAL_BACKLOG_RESUME,
        ControlInput,
        BacklogControlResult,
        kept_input=BacklogControlSignal,
    )
    RETRY = Message(
        "retry", names.UPDATE_BACKLOG_RETRY, names.SIGNAL_BACKLOG_RETRY, RetryInput, RetryResult
    )

    TABLE = MessageTable(ENQUEUE, STOP, RESUME, RETRY)
