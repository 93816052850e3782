"""The real run workflow under random people and a hostile model, checked by its promises.

Hypothesis drives live runs (the dev server, Postgres, the `openai` client over HTTP, a
worker) with random sequences of operator actions: pause, resume, cancel, approve (with
valid and invalid edits), reject, duplicate decisions, signals that do not fit, late
commands; and a model whose replies hold NUL characters, 1 MB strings, arguments that are
not JSON, unknown tools and calls repeated. After each sequence the run is driven to its
end and these must hold:
- every ended run has a receipt, whose outcome is how the run ended;
- `mirror check` finds the mirror and the history in agreement;
- no effect happened twice (effects commit with their ledger key; none twice), and the
  receipt states every effect that happened;
- every refused command changed nothing (it left no decision and no event behind);
- no run is ever stuck: running with no activity, no timer and no pending human decision;
- watchers (up to twelve) and clients holding every update slot of the run block nothing:
  each watcher sees the whole story and the receipt, every decision a command reported as
  applied is in the receipt as reported, and none it reported as recorded is lost.

Forks and oversized input are operations too: a fork at a random step is refused
before anything starts or is a run held to the same promises (no effect of its parent
happens again: effects are counted across every run); a command with a field at ten times
its bound is refused at the door, and one sent raw as a signal is recorded at most once, cut
short.
"""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import openai
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test
from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

import agentledger.demo
from agentledger.core import bounds
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.messages import RunMessages
from agentledger.core.results import DecisionResult, SayResult, WatchItem
from agentledger.core.spec import RunSpec
from agentledger.core.states import RunStatus, is_terminal
from agentledger.core.storable import NUL_SPELLED_OUT
from agentledger.core.wire import ApproveInput
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from agentledger.store.db import install_tool_schema, open_pool
from agentledger.tools import Tool, ToolContext, ToolRegistry
from agentledger.worker.worker_factory import AgentWorkers, WorkerDeps, build_worker
from tests import client_ops as chat_ops
from tests import client_ops as fork_ops
from tests import client_ops as ops
from tests import client_ops as run_watch
from tests import client_ops as steering_ops
from tests.support import run_result

T = TypeVar("T")
MB = 1_000_000
SCRIPTS: dict[str, list[tuple[Any, ...]]] = {}  # run marker -> the model's turns
MARKER = re.compile(r"\[run ([0-9a-f]+)\]")
# Watchers one example may start, and the update slots the dev server gives a run.
MAX_WATCHERS = 12
UPDATE_SLOTS = 10
MAX_STEPS = 5
CALLED = ("model_call", "completed")
# A sub-agent the model may delegate to: its runs are held to the same promises.
HELPER = {
    "instructions": "You help.",
    "allowed_tools": ["search_notes"],
    "max_steps": 3,
    "verify": {"max_rounds": 1},
    "timeouts": {"heartbeat_seconds": 2, "initial_retry_seconds": 0.1, "max_attempts": 2},
}
SESSION = {"idle_timeout": 1.0, "compact_after_turns": 2}
# What a signal that does not fit leaves behind: a refusal on the record, nothing else.
IGNORED_ON_RECORD = {"approval.refused", "message.ignored", "session.end_ignored"}
EFFECTS_TABLE = """CREATE TABLE IF NOT EXISTS property_effects (
    idempotency_key text NOT NULL, run_id text NOT NULL, at timestamptz DEFAULT now())"""


class Text(BaseModel):
    text: str


async def note_effect(args: Text, ctx: ToolContext) -> dict[str, int]:
    """A side effect: its row commits with the ledger's, in the tool's transaction."""
    await ctx.conn.execute(
        "INSERT INTO property_effects (idempotency_key, run_id) VALUES (%s, %s)",
        (ctx.idempotency_key, ctx.run_id),
    )
    return {"noted": len(args.text)}


# ---------------------------------------------------------------- the hostile model

TEXTS = {
    "plain": "invoice 7",
    "nul": "invoice\x007",
    "big": "y" * MB,
}
answers = st.sampled_from(["good", "nul", "bad", "empty", "big"])
calls = st.tuples(
    st.just("call"),
    st.sampled_from(["note_effect", "search_notes", "no_such_tool", "agent__helper"]),
    st.sampled_from(["plain", "plain", "nul", "big", "invalid_json"]),
    st.integers(1, 2),
)
turns = st.lists(st.one_of(calls, st.tuples(st.just("answer"), answers)), min_size=1, max_size=4)


def hostile_model(request: dict[str, Any]) -> Reply:
    """Plays the run's script, chosen by the marker in its task; turn by assistant count."""
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    found = MARKER.search(task)
    script = SCRIPTS.get(found.group(1), []) if found else []
    script = script or [("answer", "good")]
    done = sum(1 for m in request["messages"] if m.get("role") == "assistant")
    turn = script[min(done, len(script) - 1)]
    if turn[0] == "answer":
        content = {
            "good": "## Summary\nDone.",
            "nul": "## Summary\nDone\x00.",
            "bad": "no summary here",
            "empty": "",
            "big": "## Summary\n" + "z" * MB,
        }[turn[1]]
        return completion(request, content=content)
    _, tool, variant, times = turn
    if variant == "big":
        times = 1  # two would pass the payload limit in one reply: tested elsewhere
    text = TEXTS.get(variant, "x")
    args = {"query": text} if tool == "search_notes" else {"text": text}
    if tool == "agent__helper":
        args = {"task": text}  # a sub-agent's task, with no marker: it answers at once
    reply = completion(request, tool_calls=[(tool, args)] * times)
    if variant == "invalid_json":
        for call in reply.body["choices"][0]["message"]["tool_calls"]:
            call["function"]["arguments"] = '{"text": "unterminated'
    return reply


# ---------------------------------------------------------------- a live stack on its own loop


class Live:
    """A client, pool, model server and worker on an event loop of their own, so that
    Hypothesis (which runs rules synchronously) can drive real runs."""

    def __init__(self, address: str, database_url: str, converter: Any) -> None:
        self.address, self.database_url, self.converter = address, database_url, converter
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.model = OfflineModelServer(hostile_model)
        self.model.__enter__()
        self.task_queue = f"prop-{uuid.uuid4().hex[:8]}"
        self.call(self._open())

    def call(self, work: Coroutine[Any, Any, T], seconds: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(seconds)

    def spawn(self, work: Coroutine[Any, Any, T]) -> Future[T]:
        """Start `work` on the stack's loop and return at once (a watcher, a slot holder)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    async def _open(self) -> None:
        self.client = await Client.connect(self.address, data_converter=self.converter)
        self.pool = await open_pool(self.database_url, max_size=20)
        async with self.pool.connection() as conn:
            await conn.execute(EFFECTS_TABLE)
        effect = Tool("note_effect", "note it", Text, note_effect, side_effect=True)
        registry = ToolRegistry([*agentledger.demo.registry.tools(), effect])
        await install_tool_schema(self.pool, registry.schema())
        settings = AgentLedgerConfig.load({}).model_copy(
            update={
                "temporal_address": self.address,
                "database_url": self.database_url,
                "openai_base_url": self.model.base_url,
                "task_queue": self.task_queue,
            }
        )
        model = openai.AsyncOpenAI(base_url=self.model.base_url, api_key="x", max_retries=0)
        deps = WorkerDeps(pool=self.pool, model_client=model, registry=registry)
        self.workers: AgentWorkers = build_worker(self.client, settings, deps)
        await self.workers.__aenter__()

    async def _close(self) -> None:
        await self.workers.__aexit__(None, None, None)
        await self.pool.close()

    def close(self) -> None:
        try:
            self.call(self._close())
        finally:
            self.model.__exit__(None, None, None)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


LIVE: Live | None = None


# ---------------------------------------------------------------- the machine


class LiveRun(RuleBasedStateMachine):
    """One real run per example; each rule is something a person does to it."""

    def __init__(self) -> None:
        super().__init__()
        assert LIVE is not None
        self.live = LIVE
        self.refused: list[str] = []
        self.reported: dict[str, Any] = {}  # what each command that was not refused said
        self.answered: dict[str, Any] = {}  # a chat's message id -> the turn that answered it
        self.ended = False  # a session's end was asked for (its waiting messages stay untaken)
        self.count = 0

    def by(self, action: str) -> str:
        self.count += 1
        return f"{action}-{self.count}"

    def attempt(self, who: str, work: Coroutine[Any, Any, Any]) -> None:
        """Send a command; a refusal is expected sometimes and must change nothing. A command
        whose call timed out (a loaded machine) may or may not have landed: the promises
        checked at the end hold either way."""
        try:
            said = self.live.call(work, 60)
        except ops.OperationError:
            self.refused.append(who)
        except RPCError as err:
            if "Timeout" not in err.message:
                raise
        else:
            self.reported[who] = said

    @initialize(
        script=turns,
        budget=st.sampled_from([None, None, 60]),
        on_message=st.sampled_from(["queue", "interrupt"]),
        helpers=st.booleans(),
        session=st.booleans(),
    )
    def start(
        self,
        script: list[tuple[Any, ...]],
        budget: int | None,
        on_message: str,
        helpers: bool,
        session: bool,
    ) -> None:
        marker = uuid.uuid4().hex[:12]
        if helpers:  # it delegates first, so the sub-agent's run is under test every time
            script = [("call", "agent__helper", "plain", 1), *script]
        SCRIPTS[marker] = script
        spec = RunSpec(
            task=f"Note the invoice and report [run {marker}]",
            idempotency_key=f"prop-{marker}",
            allowed_tools=["note_effect", "search_notes"],
            approval={"always": ["note_effect"], "timeout_seconds": 120},
            max_steps=MAX_STEPS,
            budget={"max_tokens": budget} if budget else {},
            timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.1, "max_attempts": 2},
            verify={"max_rounds": 1},
            on_message=on_message,
            subagents={"helper": HELPER} if helpers else {},
            # A session: it waits for the next message after each answer, and
            # compacts (a summary call, continue-as-new) every second turn.
            session=SESSION if session else None,
        )
        started = self.live.call(
            ops.start_run(self.live.client, spec, task_queue=self.live.task_queue)
        )
        self.run_id = started.run_id

    @rule()
    def pause(self) -> None:
        who = self.by("pause")
        self.attempt(who, ops.control(self.live.client, self.run_id, "pause", by=who))

    @rule()
    def resume(self) -> None:
        who = self.by("resume")
        self.attempt(who, ops.control(self.live.client, self.run_id, "resume", by=who))

    @rule()
    def say(self) -> None:
        """A message to the run: taken at its next model call, or it interrupts."""
        who = self.by("say")
        self.attempt(who, steering_ops.say(self.live.client, self.run_id, f"hi from {who}", by=who))

    @rule()
    def chat(self) -> None:
        """A chat turn: the message said, its answer followed on the live stream."""
        who = self.by("chat")

        async def turn() -> SayResult:
            items = chat_ops.chat(
                self.live.client, self.run_id, f"chat from {who}", by=who, answer_within=2
            )
            seen: list[Any] = []
            try:
                async for item in items:
                    seen.append(item)
            except ops.OperationError:
                if not seen:  # the message itself was refused: nothing may have changed
                    raise
                # It was said (the run may have received it); only following its answer
                # failed, say as the run ended: not a refusal.
            said = SayResult.model_validate(seen[0].data)
            if seen[-1].type == "session.turn_answered":
                self.answered[said.message_id] = seen[-1].data
            return said

        self.attempt(who, turn())

    @rule()
    def end(self) -> None:
        """End a session on purpose (`agentledger end`): refused for a run that is not one."""
        who = self.by("end")
        self.attempt(who, steering_ops.end_session(self.live.client, self.run_id, by=who))
        self.ended = self.ended or who not in self.refused  # it may have landed

    @rule()
    def cancel(self) -> None:
        self.attempt(self.by("cancel"), ops.cancel(self.live.client, self.run_id))

    @rule(
        edit=st.sampled_from(
            [None, {"text": "edited"}, {"max_tokens": 10**6}, {"max_tokens": -5}, {"nope": 1}]
        )
    )
    def approve(self, edit: dict[str, Any] | None) -> None:
        who = self.by("approve")
        self.attempt(
            who, ops.approve(self.live.client, self.run_id, by=who, role="approver", edit=edit)
        )

    @rule()
    def reject(self) -> None:
        who = self.by("reject")
        self.attempt(
            who,
            ops.reject(self.live.client, self.run_id, by=who, role="approver", reason="no"),
        )

    @rule()
    def approve_twice_at_once(self) -> None:
        first, second = self.by("twice"), self.by("twice")

        async def both() -> list[Any]:
            return await asyncio.gather(
                ops.approve(self.live.client, self.run_id, by=first, role="approver"),
                ops.approve(self.live.client, self.run_id, by=second, role="approver"),
                return_exceptions=True,
            )

        outcomes = self.live.call(both())
        for who, outcome in zip((first, second), outcomes, strict=True):
            if isinstance(outcome, ops.OperationError):
                self.refused.append(who)
            elif isinstance(outcome, RPCError) and "Timeout" in outcome.message:
                continue  # landed or not, as in `attempt`
            elif isinstance(outcome, BaseException):
                raise outcome

    @rule(role=st.sampled_from(["approver", "intern"]))
    def stale_signal(self, role: str) -> None:
        """A signal cannot be refused: one that does not fit must be recorded and ignored."""
        who = self.by("signal")
        self.refused.append(who)

        async def send() -> None:
            handle = self.live.client.get_workflow_handle(self.run_id)
            decision = ApproveInput(action_hash="0" * 16, by=who, role=role)
            try:
                await handle.signal(RunMessages.APPROVE.kept_signal, decision)
            except Exception as err:  # the run has ended: the late signal goes nowhere
                if "not found" not in str(err).lower() and "completed" not in str(err).lower():
                    raise

        self.live.call(send())

    # ------------------------------------------------------------ watchers

    @initialize()
    def nobody_watching(self) -> None:
        self.watchers: list[Future[list[WatchItem]]] = []
        self.holders: list[Future[None]] = []

    @rule(count=st.sampled_from([1, 4, 12]))
    def watch(self, count: int) -> None:
        """People follow the run live; watching must take nothing decisions need."""
        for _ in range(min(count, MAX_WATCHERS - len(self.watchers))):
            self.watchers.append(self.live.spawn(self.follow()))

    @rule()
    def hold_every_update_slot(self) -> None:
        """Clients that long-poll with updates hold every slot the server gives the run:
        decisions and controls must still land (as signals) and say so truthfully."""
        if not self.holders:
            self.holders = [self.live.spawn(self.hold_a_slot()) for _ in range(UPDATE_SLOTS)]

    async def follow(self) -> list[WatchItem]:
        live = self.live
        return [i async for i in run_watch.watch(live.client, self.run_id, pool=live.pool)]

    async def hold_a_slot(self) -> None:
        stream = WorkflowStreamClient.create(self.live.client, self.run_id)
        try:
            async for _ in stream.subscribe(from_offset=10**9):
                pass
        except (RPCError, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError):
            pass  # the run ended: nothing left to hold

    async def check_watching(self) -> None:
        """Every watcher saw the whole story and the receipt; no decision a command reported
        as applied is missing from the receipt, or applied as another; none it reported as
        recorded was lost (applied, or refused on the record, unless the run ended first)."""
        receipt = await ops.receipt(self.live.pool, self.run_id)
        for watcher in getattr(self, "watchers", []):
            story = await asyncio.wrap_future(watcher)
            live = [i for i in story if i.kind != "receipt"]
            # Followed live: the stream, whole, then what its last reads could not give from
            # the mirror (no offset); a watcher that came after the end reads only the mirror.
            said = [i for i in live if i.kind == "event"]  # model text comes from Postgres
            streamed = [i for i in said if i.offset is not None]
            assert said[: len(streamed)] == streamed
            assert [i.offset for i in streamed] == list(range(len(streamed)))
            events = [i for i in live if i.kind == "event" and i.type != "step.retry"]
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            kinds = [e.type for e in events]
            assert kinds[0] == "run.started" and "run.finished" in kinds, kinds
            # A decision signalled as the run ended is refused on the record after it.
            after = kinds[kinds.index("run.finished") + 1 :]
            assert set(after) <= IGNORED_ON_RECORD, kinds
            assert story[-1].kind == "receipt"
            assert story[-1].data["outcome"] == receipt["outcome"]
        applied = {(a["approval_id"], a["by"]): a["decision"] for a in receipt["approvals"]}
        async with self.live.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT data->>'by' FROM events WHERE run_id = %s AND type = 'approval.refused'",
                (self.run_id,),
            )
            refused_on_record = {row[0] for row in await cur.fetchall()}
        for who, said in self.reported.items():
            if not isinstance(said, DecisionResult):
                continue
            if said.decision in ("approved", "rejected"):
                assert applied.get((said.approval_id, who)) == said.decision, (who, said)
            elif said.decision == "recorded":
                kept = (said.approval_id, who) in applied or who in refused_on_record
                assert kept or receipt["outcome"] != "completed", (who, said, receipt)

    @rule(seconds=st.sampled_from([0.05, 0.3, 1.0]))
    def wait(self, seconds: float) -> None:
        self.live.call(asyncio.sleep(seconds))

    def teardown(self) -> None:
        try:
            if hasattr(self, "run_id"):
                self.live.call(self.finish_and_check(), 240)
                self.live.call(self.check_watching(), 120)
        finally:
            for holder in getattr(self, "holders", []):
                holder.cancel()

    # ------------------------------------------------------------ the end, and the promises

    async def finish_and_check(self) -> None:
        outcome = await self.drive_to_end()
        client, pool, run_id = self.live.client, self.live.pool, self.run_id
        receipt = await ops.receipt(pool, run_id)
        assert receipt["outcome"] == outcome, (receipt["outcome"], outcome)

        report = await ops.check_mirror(client, pool, run_id)
        assert report["agrees"], report["differences"]

        async with pool.connection() as conn:
            cur = await conn.execute(
                """SELECT idempotency_key, count(*) FROM property_effects
                   GROUP BY idempotency_key HAVING count(*) > 1"""
            )
            assert await cur.fetchall() == [], "an effect happened twice"
            cur = await conn.execute(
                "SELECT idempotency_key FROM property_effects WHERE run_id = %s", (run_id,)
            )
            happened = {row[0] for row in await cur.fetchall()}
            cur = await conn.execute(
                """SELECT type, data->>'by' FROM events
                   WHERE run_id = %s AND data->>'by' = ANY(%s)""",
                (run_id, self.refused),
            )
            traces = await cur.fetchall()
        stated = {
            e["idempotency_key"]
            for e in receipt["side_effects"]
            if e["ok"] and not e["duplicate_prevented"]
        }
        assert happened <= stated, f"effects the receipt does not state: {happened - stated}"
        deciders = {a["by"] for a in receipt["approvals"]}
        assert not deciders & set(self.refused), "a refused decision was applied"
        # A refused signal is recorded (approval.refused, message.ignored) and nothing else.
        assert all(kind in IGNORED_ON_RECORD for kind, _ in traces), traces
        self.check_messages(receipt, await _ignored_messages(pool, run_id))
        self.check_turns(receipt)
        await self.check_children(receipt)

    async def check_children(self, receipt: dict[str, Any]) -> None:
        """Each sub-agent run ended with its receipt, names its parent, agrees with its
        history, and its spend is inside the parent's."""
        spent = 0.0
        for child_id in receipt["children"]:
            outcome = await self.drive_to_end(child_id)
            child = await ops.receipt(self.live.pool, child_id)
            assert child["outcome"] == outcome and child["parent_run_id"] == self.run_id, child
            report = await ops.check_mirror(self.live.client, self.live.pool, child_id)
            assert report["agrees"], report["differences"]
            spent += child["cost_usd"]
        assert receipt["cost_usd"] >= round(spent, 6) - 1e-6, (receipt["cost_usd"], spent)

    def check_messages(self, receipt: dict[str, Any], ignored: set[str]) -> None:
        """Every message a `say` reported as accepted (the run listed it) is in the receipt,
        and none is both held and ignored; a run that completed with a model call to spare took
        every one it holds (unless a session was ended on purpose),
        each before a model call step, in the order said. (One reported as recorded, when no
        answer came in time, may have reached the run as it wrote its receipt: then only
        `watch` shows it ignored.)"""
        held = {m["message_id"]: m for m in receipt["messages"]}
        assert not set(held) & ignored, (held, ignored)
        for who, said in self.reported.items():
            if isinstance(said, SayResult) and said.delivered == "accepted":
                assert said.message_id in held, (who, said)
        steps = {s["seq"]: s for s in receipt["steps"]}
        calls = sum(
            1 for s in steps.values() if s["type"] == "model_call" and s["status"] == "completed"
        )
        # A call was left for it (a session ended on purpose leaves what waited untaken).
        if receipt["outcome"] == "completed" and calls < MAX_STEPS and not self.ended:
            assert all(m["taken_at"] is not None for m in held.values()), receipt["messages"]
        taken = [m["taken_before_step"] for m in held.values() if m["taken_at"] is not None]
        assert taken == sorted(taken), receipt["messages"]
        for seq in taken:
            assert seq not in steps or steps[seq]["type"] == "model_call", (seq, steps)

    def check_turns(self, receipt: dict[str, Any]) -> None:
        """A session's receipt has a section per turn, numbered in order, each turn's steps
        after the last's; every turn a chat saw answered is there, with the same answer."""
        turns = receipt["turns"]
        assert [t["turn"] for t in turns] == list(range(1, len(turns) + 1)), turns
        firsts = [t["first_step"] for t in turns]
        assert firsts == sorted(firsts), turns
        for message_id, seen in self.answered.items():
            [turn] = [t for t in turns if message_id in t["message_ids"]]
            # The mirror spells a NUL out (agentledger/core/storable.py); the stream has it raw.
            answer = (seen["answer"] or "").replace("\x00", NUL_SPELLED_OUT)
            assert turn["turn"] == seen["turn"] and turn["answer"] == answer, (turn, seen)

    async def drive_to_end(self, run_id: str | None = None) -> str:
        """Answer whatever the run waits for until it ends; it must never sit stuck."""
        run_id = run_id or self.run_id
        client, handle = self.live.client, self.live.client.get_workflow_handle(run_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 180
        last_seen, idle_since = None, loop.time()
        while loop.time() < deadline:
            described = await handle.describe()
            if described.status != WorkflowExecutionStatus.RUNNING:
                break
            state = await ops.status(client, run_id)
            if is_terminal(state.status):
                await asyncio.sleep(0.1)
                continue
            if state.status == RunStatus.WAITING_FOR_MESSAGE:
                pass  # a session between turns: its idle timer ends it (the deadline bounds it)
            elif state.pending_approval is not None:
                await self.quietly(ops.approve(client, run_id, by="closer", role="approver"))
            elif state.pause_requested:
                await self.quietly(ops.control(client, run_id, "resume", by="closer"))
            else:
                seen = (state.status, len(state.steps), state.current_step_id)
                if seen != last_seen:
                    last_seen, idle_since = seen, loop.time()
                elif loop.time() - idle_since > 5:
                    raw = described.raw_description
                    working = (
                        raw.pending_activities
                        or raw.pending_children
                        or raw.HasField("pending_workflow_task")
                    )
                    assert working, f"stuck: {state.status.value} with nothing pending"
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"{run_id} did not end within the bound")
        return (await run_result(client, run_id)).status.value

    @staticmethod
    async def quietly(work: Coroutine[Any, Any, Any]) -> None:
        try:
            await work
        except ops.OperationError:
            pass  # the run moved on meanwhile


async def _ignored_messages(pool: Any, run_id: str) -> set[str]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT data->>'message_id' FROM events WHERE run_id = %s AND type = 'message.ignored'",
            (run_id,),
        )
        return {row[0] for row in await cur.fetchall()}


@pytest.mark.timeout(900)  # 25 live runs, watched, on a 2-core machine others share
def test_operators_and_a_hostile_model_never_break_the_promises(
    env: WorkflowEnvironment, database_url: str
) -> None:
    global LIVE
    LIVE = Live(
        env.client.service_client.config.target_host, database_url, env.client.data_converter
    )
    try:
        run_state_machine_as_test(
            LiveRun,
            settings=settings(
                max_examples=25,
                stateful_step_count=6,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        LIVE.close()
        LIVE = None


# ---------------------------------------------------------------- forks and oversized input


def _ten_times(field: str) -> str:
    return "x" * (10 * bounds.limit_for(field))


OVERSIZED = {
    "approve by": lambda c, r: ops.approve(c, r, by=_ten_times("by"), role="approver"),
    "approve edit": lambda c, r: ops.approve(
        c, r, by="big", role="approver", edit={"text": _ten_times("edit")}
    ),
    "reject reason": lambda c, r: ops.reject(
        c, r, by="big", role="approver", reason=_ten_times("reason")
    ),
    "pause by": lambda c, r: ops.control(c, r, "pause", by=_ten_times("by")),
    "resume by": lambda c, r: ops.control(c, r, "resume", by=_ten_times("by")),
}


class LiveRunForksAndOversized(LiveRun):
    """The same run and people, plus forks at any step and input past every bound."""

    def __init__(self) -> None:
        super().__init__()
        self.forks: list[str] = []  # forks that started (refused ones started nothing)
        self.oversized_signals = 0

    def teardown(self) -> None:
        super().teardown()
        if hasattr(self, "run_id"):
            self.live.call(self.check_forks_and_oversized(), 240 + 120 * len(self.forks))

    @rule(pick=st.integers(0, 11), edited=st.booleans())
    def fork(self, pick: int, edited: bool) -> None:
        """A fork at any step is refused before anything starts, or it is a run like any
        other."""
        self.fork_at(pick, edited, ("model_call", "tool_call", "approval", "verify"))

    @rule(pick=st.integers(0, 11), edited=st.booleans())
    def fork_at_a_model_or_tool_step(self, pick: int, edited: bool) -> None:
        """The forks that start: at a finished model or tool step (an edit at a tool step)."""
        self.fork_at(pick, edited, ("model_call", "tool_call"))

    def fork_at(self, pick: int, edited: bool, kinds: tuple[str, ...]) -> None:
        async def attempt() -> str | None:
            at, kind = pick + 1, "model_call"
            for _ in range(20):  # the first steps may not be in the mirror yet
                async with self.live.pool.connection() as conn:
                    cur = await conn.execute(
                        """SELECT seq, type FROM steps WHERE run_id = %s AND final
                           AND type = ANY(%s) ORDER BY seq""",
                        (self.run_id, list(kinds)),
                    )
                    finished = await cur.fetchall()
                if finished:
                    at, kind = finished[pick % len(finished)]
                    break
                await asyncio.sleep(0.25)
            try:
                started = await fork_ops.fork_run(
                    self.live.client,
                    self.live.pool,
                    self.run_id,
                    from_step=at,
                    edit_output={"noted": 7} if edited and kind == "tool_call" else None,
                    task_queue=self.live.task_queue,
                )
            except ops.OperationError:  # ForkError among them: nothing started
                return None
            return started.run_id

        fork_id = self.live.call(attempt())
        if fork_id is not None and fork_id not in self.forks:
            self.forks.append(fork_id)

    @rule(what=st.sampled_from(sorted(OVERSIZED)))
    def oversized_at_the_door(self, what: str) -> None:
        """Refused before anything is sent, whatever the run is doing."""
        try:
            self.live.call(OVERSIZED[what](self.live.client, self.run_id), 60)
        except bounds.InputTooLarge:
            return
        raise AssertionError(f"{what} at ten times its bound was not refused at the door")

    @rule()
    def oversized_signal(self) -> None:
        """Sent raw, past the door: a signal cannot be refused, so it is recorded, once, cut."""

        async def send() -> bool:
            handle = self.live.client.get_workflow_handle(self.run_id)
            decision = ApproveInput(action_hash="0" * 16, by="o" * 300_000, role="approver")
            try:
                await handle.signal(RunMessages.APPROVE.kept_signal, decision)
            except RPCError as err:  # the run has ended: the signal goes nowhere
                if "completed" not in err.message.lower() and "not found" not in err.message:
                    raise
                return False
            return True

        self.oversized_signals += int(self.live.call(send()))

    async def check_forks_and_oversized(self) -> None:
        client, pool = self.live.client, self.live.pool
        for fork_id in self.forks:
            outcome = await self.drive_to_end(fork_id)
            receipt = await ops.receipt(pool, fork_id)
            assert receipt["outcome"] == outcome, (fork_id, receipt["outcome"], outcome)
            assert receipt["forked_from"]["parent_run_id"] == self.run_id
            report = await ops.check_mirror(client, pool, fork_id)
            assert report["agrees"], report["differences"]
            await self.fork_made_no_effect_of_its_parent(fork_id, receipt)
        async with pool.connection() as conn:
            cur = await conn.execute(
                """SELECT idempotency_key, count(*) FROM property_effects
                   GROUP BY idempotency_key HAVING count(*) > 1"""
            )
            assert await cur.fetchall() == [], "an effect happened twice"
            cur = await conn.execute(
                """SELECT data->>'by' FROM events
                   WHERE run_id = %s AND type = 'approval.refused' AND data->>'by' LIKE 'ooo%%'""",
                (self.run_id,),
            )
            recorded = [row[0] for row in await cur.fetchall()]
        assert len(recorded) <= self.oversized_signals, "a refused input recorded twice"
        assert all(len(by) <= bounds.RECORDED_CHARS + 40 for by in recorded), "not cut short"

    async def fork_made_no_effect_of_its_parent(self, fork_id: str, receipt: Any) -> None:
        """Every effect the fork made is stated in its receipt, and none was one its parent
        already made: an identical call found the parent's ledger row instead."""
        async with self.live.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT idempotency_key FROM property_effects WHERE run_id = %s", (fork_id,)
            )
            made = {row[0] for row in await cur.fetchall()}
            cur = await conn.execute(
                "SELECT idempotency_key FROM property_effects WHERE run_id = %s", (self.run_id,)
            )
            parents = {row[0] for row in await cur.fetchall()}
        stated = {e["idempotency_key"] for e in receipt["side_effects"] if e["ok"]}
        assert made <= stated, f"effects {fork_id}'s receipt does not state: {made - stated}"
        assert not made & parents, "a fork made an effect its parent had made"


def test_forks_and_oversized_input_never_break_the_promises(
    env: WorkflowEnvironment, database_url: str
) -> None:
    global LIVE
    LIVE = Live(
        env.client.service_client.config.target_host, database_url, env.client.data_converter
    )
    try:
        run_state_machine_as_test(
            LiveRunForksAndOversized,
            settings=settings(
                max_examples=20,
                stateful_step_count=10,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    finally:
        LIVE.close()
        LIVE = None
