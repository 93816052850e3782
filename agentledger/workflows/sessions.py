"""Sessions: a run that stays open after its answer for the next message (spec `session`).

A component of AgentRunWorkflow, which keeps its update and signal handlers. A session
answers its task as any run does, but instead of ending it records the turn
(`progress.turns`), shows `waiting_for_message` with the answer, and waits for a message
(`agentledger chat`, `say`) in a `wait_condition` with the idle timeout: a timer on the server,
so no worker is held. The message starts the next turn, whose steps, approvals and checks
are a run's; `max_steps` and the verify rounds count per turn, the budget across the
session. Idle for `idle_timeout`, the session completes with its receipt, which has a
section per turn. `agentledger end` (an update, or a signal the server keeps while no worker
runs) ends it on purpose the same way: at once when idle, else after the turn. A pause while
idle shows `paused`: a message said meanwhile waits, and the turn it starts begins at the
resume, from which the idle clock starts again.

Every `compact_after_turns` turns (or when Temporal suggests the history is long), while
idle, the turns before the last `keep_turns` are summarised by a model call (the run's own
model, through `model.complete`), and the session continues as new: from then on the model
reads its system message, the summary and the recent turns (`ConversationCut`), while the
`conversation` table keeps every message whole. Whenever it continues as new (compacted or
not), the session drops from its state what the mirror has whole: turns already summarised
and older messages and steps beyond a recent window (`_leave_in_mirror`, counted in
`left_in_mirror`), and cuts the texts of the taken messages it keeps to excerpts, so what it
carries is bounded however many messages the session takes: by the windows, and by the
messages said since its last model call, which wait whole for the next.

A message said while a turn is in flight may cut it short (double-texting, generation 6;
agentledger.workflows.steering): `interrupt` ends it at its next step boundary, its work
kept in the conversation and the receipt; `rollback` ends it at once and forgets it: the
model reads the conversation without it from then on (`forgotten`), and is told of the side
effects it made, which stand (`kept_effects` in the receipt). The message starts the next
turn.

Only runs whose spec has `session` take any of these paths, so every history recorded
before sessions replays unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from agentledger.workflows.recording import RunContext
from agentledger.workflows.run_messages import check_control
from agentledger.workflows.steering import Steering

with workflow.unsafe.imports_passed_through():
    from agentledger.core import bounds, keys
    from agentledger.core.events import EventType
    from agentledger.core.results import ControlResult, RunMessage, SessionTurn
    from agentledger.core.states import RunStatus, StepStatus, is_terminal
    from agentledger.core.wire import (
        ControlInput,
        ConversationCut,
        ModelCallResult,
        SummaryRequest,
    )

# The most of a summary the run carries (and sends with every model call after it).
SUMMARY_CHARS = 8000
# What the model is told of a rolled-back turn's side effects, which stand.
ROLLED_BACK = (
    "A turn of this conversation was rolled back at the person's request: it is forgotten, "
    "but these actions it had already taken stand and were not undone: {effects}. Do not "
    "take them again unless asked to."
)
# The most recent turns (at least `keep_turns`) and taken messages a compacted session carries.
TURNS_CARRIED = 10
MESSAGES_CARRIED = 20


class TurnCut(Exception):
    """A message cut the session's turn short (double-texting interrupt or rollback)."""

    def __init__(self, how: Literal["interrupted", "rolled_back"]) -> None:
        super().__init__(how)
        self.how = how


class Sessions:
    """A run's turns, its idle waits between them, its end on purpose and its compaction."""

    def __init__(
        self,
        run: RunContext,
        steering: Steering,
        continue_as_new: Callable[[], Awaitable[None]],
    ) -> None:
        self.spec, self.run_id, self.progress, self.recorder = run.parts()
        self.steering = steering
        # The run's own, which a compacted session takes between turns (it never returns).
        self.continue_as_new = continue_as_new
        self.double_texting = run.double_texting

    # ------------------------------------------------------------ turns

    def calls_left(self) -> bool:
        """Whether the run (a session: the turn) may call the model again (`max_steps`)."""
        used = self.progress.model_calls
        if self.spec.session is not None:
            used -= self.progress.turn_start[0]
        return used < self.spec.max_steps

    def open_turn(self) -> None:
        """A turn begins: its task (the first) or the messages waiting are what it answers."""
        progress = self.progress
        progress.turn_start = (
            progress.model_calls,
            progress.tokens_in + progress.tokens_out,
            progress.cost_usd,
        )
        progress.verify_rounds = 0
        progress.malformed_streak = progress.argument_streak = 0
        first = not progress.turns
        progress.turns.append(
            SessionTurn(
                turn=self._turn_count() + 1,
                asked=bounds.excerpt(self.spec.task) if first else None,
                first_step=progress.seq + 1,
                started_at=workflow.now(),
                first_message=progress.stored_messages
                + len(progress.pending_messages)
                - (1 if first else 0),  # the first turn's message, the task, is already there
            )
        )
        self.recorder.event(EventType.SESSION_TURN_STARTED, data={"turn": len(progress.turns)})
        self.recorder.set_status(RunStatus.PLANNING)  # a continuation from here picks the turn up

    def _turn_count(self) -> int:
        return self.progress.left_in_mirror.turns + len(self.progress.turns)

    def took(self, messages: list[RunMessage]) -> None:
        """Messages taken during a session's turn are what it answers."""
        if not messages or self.spec.session is None or not self.progress.turns:
            return
        message_ids, texts = [m.message_id for m in messages], [m.text for m in messages]
        turn = self.progress.turns[-1]
        if turn.answered_at is not None:
            return
        asked = "\n".join(t for t in [turn.asked, *texts] if t)
        self.progress.turns[-1] = turn.model_copy(
            update={
                "message_ids": [*turn.message_ids, *message_ids],
                "asked": bounds.excerpt(asked),
            }
        )

    async def turn_answered(self, answer: str) -> None:
        """The turn's answer passed its checks: record it and wait for the next message."""
        progress = self.progress
        calls, tokens, cost = progress.turn_start
        turn = progress.turns[-1].model_copy(
            update={
                "answer": bounds.excerpt(answer),
                "answer_chars": len(answer),
                "last_step": progress.seq,
                "model_calls": progress.model_calls - calls,
                "tokens": progress.tokens_in + progress.tokens_out - tokens,
                "cost_usd": round(progress.cost_usd - cost, 6),
                "answered_at": workflow.now(),
                "ended": "answered" if self.double_texting else None,
            }
        )
        progress.turns[-1] = turn
        progress.answer = answer
        progress.idle_since = workflow.now()
        progress.current_step_id = None
        self.recorder.set_status(RunStatus.WAITING_FOR_MESSAGE)
        self.recorder.event(
            EventType.SESSION_TURN_ANSWERED,
            data={
                "turn": turn.turn,
                "message_ids": turn.message_ids,
                "answer": turn.answer,
                "answer_chars": turn.answer_chars,
                "model_calls": turn.model_calls,
                "tokens": turn.tokens,
                "cost_usd": turn.cost_usd,
            },
        )
        await self.recorder.flush()  # the mirror shows the answer and the wait at once

    def cut(self, how: Literal["interrupted", "rolled_back"]) -> None:
        """Close the turn a message cut short: what it did and spent is on record; a rolled
        back turn is forgotten (the model reads the conversation without it), and the side
        effects it made, which stand, are named in its record and told to the model."""
        progress = self.progress
        turn = progress.turns[-1]
        calls, tokens, cost = progress.turn_start
        its_steps = {s.step_id for s in progress.steps if s.seq >= turn.first_step}
        kept = [
            f"{e.tool}({keys.canonical_json(e.arguments)})"
            for e in progress.side_effects
            if e.step_id in its_steps and e.ok and not e.duplicate_prevented
        ]
        if how == "rolled_back":
            end = progress.stored_messages + len(progress.pending_messages)
            progress.forgotten.append((turn.first_message, end))
        progress.turns[-1] = turn.model_copy(
            update={
                "ended": how,
                "last_step": progress.seq,
                "model_calls": progress.model_calls - calls,
                "tokens": progress.tokens_in + progress.tokens_out - tokens,
                "cost_usd": round(progress.cost_usd - cost, 6),
                "kept_effects": kept if how == "rolled_back" else [],
            }
        )
        progress.current_step_id = None
        self.recorder.event(
            EventType.SESSION_TURN_ROLLED_BACK
            if how == "rolled_back"
            else EventType.SESSION_TURN_INTERRUPTED,
            data={"turn": turn.turn, "kept_effects": progress.turns[-1].kept_effects},
        )
        if how == "rolled_back" and kept:
            progress.pending_messages.append(
                {"role": "system", "content": ROLLED_BACK.format(effects="; ".join(kept))}
            )

    async def next_message(self) -> bool:
        """Wait, holding no worker, for a message; False when the session stayed idle for
        its idle timeout, or was ended (`agentledger end`). Between turns is where a session
        compacts and continues as new, and where a pause shows `paused`."""
        session = self.spec.session
        assert session is not None
        while True:
            if self.progress.end_requested_by is not None:
                return False
            if self.progress.pause_requested:
                await self._paused_while_idle()
                continue
            if self.steering.messages_waiting():
                return True
            if self._compaction_due():
                await self._compact()
                await self.continue_as_new()
            since = self.progress.idle_since or workflow.now()
            left = since + timedelta(seconds=session.idle_timeout) - workflow.now()
            if left.total_seconds() <= 0:
                return self.steering.messages_waiting()
            try:
                await workflow.wait_condition(self._idle_over, timeout=left)
            except TimeoutError:
                # A message that came as the timer fired still starts a turn.
                return self.steering.messages_waiting() and self.progress.end_requested_by is None

    def _idle_over(self) -> bool:
        progress = self.progress
        return (
            self.steering.messages_waiting()
            or progress.pause_requested
            or progress.end_requested_by is not None
        )

    async def _paused_while_idle(self) -> None:
        """A pause while idle: `paused` until resumed (or ended); a message said meanwhile
        waits for the resume, and the idle clock starts again then."""
        progress = self.progress
        progress.pause_reason = progress.pause_reason or (
            f"paused by {progress.paused_by or 'a person'} while the session was idle"
        )
        self.recorder.set_status(RunStatus.PAUSED)
        self.recorder.event(
            EventType.RUN_PAUSED, data={"reason": progress.pause_reason, "by": progress.paused_by}
        )
        await self.recorder.flush()
        await workflow.wait_condition(
            lambda: not progress.pause_requested or progress.end_requested_by is not None
        )
        progress.pause_reason = None
        progress.idle_since = workflow.now()
        if progress.pause_requested:  # ended while paused: it completes from here
            return
        self.recorder.event(EventType.RUN_RESUMED)
        if not self.steering.messages_waiting():
            self.recorder.set_status(RunStatus.WAITING_FOR_MESSAGE)
            await self.recorder.flush()

    # ------------------------------------------------------------ ending on purpose

    def end(self, input: ControlInput) -> ControlResult:
        turns = self.progress.turns
        idle = bool(turns) and turns[-1].answered_at is not None
        self._end_requested(input)
        return ControlResult(
            status=self.progress.status,
            paused=self.progress.pause_requested,
            message=(
                "the session ends now: it completes with its last answer and writes its receipt"
                if idle
                else "the session ends when its current turn has answered: it completes with "
                "that answer and writes its receipt"
            ),
        )

    def validate_end(self, input: ControlInput) -> None:
        check_control(input)
        refusal = self._end_refusal()
        if refusal is not None:
            raise ApplicationError(refusal)

    def end_signal(self, input: ControlInput) -> None:
        """A signal cannot be refused: an end that does not apply is recorded and ignored."""
        refusal = self._end_refusal()
        if refusal is not None:
            self.recorder.event(
                EventType.SESSION_END_IGNORED, data={"by": input.by, "reason": refusal}
            )
            return
        self._end_requested(input)

    def _end_refusal(self) -> str | None:
        if is_terminal(self.progress.status):
            return (
                f"run {self.run_id} already ended as {self.progress.status.value}; "
                f"`agentledger receipt {self.run_id}` shows how"
            )
        if self.spec.session is None:
            return (
                f"run {self.run_id} is not a session (its spec has no `session`), so it ends "
                f"with its answer; `agentledger cancel {self.run_id}` stops it now"
            )
        return None

    def _end_requested(self, input: ControlInput) -> None:
        if self.progress.end_requested_by is not None:
            return  # asked already: the first asker is on record
        self.progress.end_requested_by = input.by
        self.recorder.event(EventType.SESSION_END_REQUESTED, data={"by": input.by})

    # ------------------------------------------------------------ compaction

    def _compaction_due(self) -> bool:
        session = self.spec.session
        assert session is not None
        info = workflow.info()
        since = self._turn_count() - self.progress.compacted_at_turn
        return (
            since >= session.compact_after_turns
            or info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.spec.history_events_limit
        )

    async def _compact(self) -> None:
        """Summarise the turns before the last `keep_turns` (those not summarised yet), so
        the model reads the summary and the recent turns from now on."""
        session = self.spec.session
        assert session is not None
        progress = self.progress
        progress.compacted_at_turn = self._turn_count()
        older = self._turn_count() - session.keep_turns  # the turns the summary is to cover
        if older <= progress.summarised_turns:
            return  # nothing new to summarise: the history alone was long
        keep_from = progress.turns[-session.keep_turns].first_message
        asked = SummaryRequest(
            first=progress.summary_keeps_from or 1, end=keep_from, previous=progress.summary
        )
        turns = [t.turn for t in progress.turns if progress.summarised_turns < t.turn <= older]
        reply = await self._summary_call(asked, turns)
        progress.summary = (reply.content or progress.summary or "")[:SUMMARY_CHARS]
        progress.summary_keeps_from = keep_from
        progress.summarised_turns = older
        progress.summaries += 1

    def leave_in_mirror(self) -> None:
        """Drop from the state what the mirror has whole and the session needs no more: the
        turns the summary covers beyond the last TURNS_CARRIED, the taken messages beyond
        the last MESSAGES_CARRIED (the rest cut to excerpts), and the finished steps before
        the first turn kept. Called as a session continues as new, between steps; sessions
        that never grew past the windows carry what they did."""
        session = self.spec.session
        assert session is not None
        progress = self.progress
        left = progress.left_in_mirror
        window = max(TURNS_CARRIED, session.keep_turns)
        turns = [
            t
            for i, t in enumerate(progress.turns)
            if i >= len(progress.turns) - window or t.turn > progress.summarised_turns
        ]
        taken = [i for i, m in enumerate(progress.messages) if m.taken_at is not None]
        dropped = set(taken[: max(0, len(taken) - MESSAGES_CARRIED)])
        messages = [
            m if m.taken_at is None else m.model_copy(update={"text": bounds.excerpt(m.text)})
            for i, m in enumerate(progress.messages)
            if i not in dropped
        ]
        first_step = turns[0].first_step if turns else progress.seq + 1
        steps = [s for s in progress.steps if s.seq >= first_step or s.status == StepStatus.RUNNING]
        progress.left_in_mirror = left.model_copy(
            update={
                "turns": left.turns + len(progress.turns) - len(turns),
                "messages": left.messages + len(dropped),
                "steps": left.steps + len(progress.steps) - len(steps),
            }
        )
        progress.turns, progress.messages, progress.steps = turns, messages, steps

    async def _summary_call(self, asked: SummaryRequest, turns: list[int]) -> ModelCallResult:
        """One model call of the run's model that summarises; a step of the run like any."""
        timeouts = self.spec.timeouts
        async with self.recorder.step("model_call", "summary", moves_status=False) as step:
            reply = await self.steering.model_reply(
                step,
                lambda mirror: self.steering.model_input(
                    step.id,
                    mirror,
                    model=self.spec.model.model,
                    allowed_tools=[],
                    temperature=0.0,
                    provider=self.spec.model.provider,
                    summarize=asked,
                ),
                timeouts.max_attempts,
                f"summarise turns {turns[0]}-{turns[-1]} of the session",
            )
            self.progress.spend(reply.usage.input_tokens, reply.usage.output_tokens, reply.cost_usd)
            step.end(
                StepStatus.COMPLETED,
                attempt=reply.attempt,
                output={
                    "content": reply.content,
                    "tool_calls": [],
                    "journal_attempt": reply.journal_attempt,
                    "summarised_turns": turns,
                },
                tokens_in=reply.usage.input_tokens,
                tokens_out=reply.usage.output_tokens,
                cost_usd=reply.cost_usd,
            )
        self.recorder.event(EventType.SESSION_COMPACTED, step.id, {"turns": turns})
        return reply

    def conversation_cut(self) -> ConversationCut | None:
        """What a model call of a compacted session reads instead of the whole conversation."""
        if self.progress.summary is None or not self.progress.summary_keeps_from:
            return None
        return ConversationCut(
            summary=self.progress.summary, keep_from=self.progress.summary_keeps_from
        )
