"""Record workflow histories from real runs into tests/histories/, for the replay test.

Run after adding a scenario or changing workflow code: `python scripts/record_histories.py`.
Existing files are kept (runs in flight were started by the code that wrote them); pass
--force to record every scenario again. It starts its own in-memory Temporal dev server,
embedded Postgres and offline model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import WorkflowIDConflictPolicy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from psycopg_pool import AsyncConnectionPool  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import agentledger.demo  # noqa: E402
from agentledger.activities.model import SUMMARY_PROMPT  # noqa: E402
from agentledger.activities.model_rates import RATED_TENANTS_SECONDS  # noqa: E402
from agentledger.client import approver_keys  # noqa: E402
from agentledger.core import approval_signatures  # noqa: E402
from agentledger.core._state import RunInput  # noqa: E402
from agentledger.core.admission_models import AdmissionInput, TenantLimits  # noqa: E402
from agentledger.core.budgets import BudgetLimit  # noqa: E402
from agentledger.core.constants import BUDGET_ALERT_WORKFLOW_NAME  # noqa: E402
from agentledger.core.errors import OperationError  # noqa: E402
from agentledger.core.identity import Identity  # noqa: E402
from agentledger.core.policy_rules import TenantPolicy  # noqa: E402
from agentledger.core.results import ForkOrigin, PendingApproval  # noqa: E402
from agentledger.core.schedule_models import FireInput, fire_workflow_id, schedule_id  # noqa: E402
from agentledger.core.spec import RunSpec, Signer  # noqa: E402
from agentledger.core.standing_approvals import StandingApproval  # noqa: E402
from agentledger.core.webhook_models import (  # noqa: E402
    DeliveryInput,
    RunNotifierInput,
    run_notifier_id,
)
from agentledger.dev.offline_model import Reply, completion, offline_planner  # noqa: E402
from agentledger.profiles import Agent  # noqa: E402
from agentledger.store.budget_store import BudgetStore  # noqa: E402
from agentledger.store.standing_store import StandingStore  # noqa: E402
from agentledger.store.webhook_store import WebhookStore  # noqa: E402
from agentledger.tools import Tool, ToolContext, ToolRegistry  # noqa: E402
from agentledger.workflows.admission import TenantAdmissionWorkflow, admission_id  # noqa: E402
from agentledger.workflows.redeliveries import RedeliveryWorkflow  # noqa: E402
from agentledger.workflows.run_notifier import RunNotifierWorkflow  # noqa: E402
from agentledger.workflows.scheduled_fires import ScheduledFireWorkflow  # noqa: E402
from scripts.recording_stack import recording_worker  # noqa: E402
from tests import client_ops as ops  # noqa: E402
from tests import client_ops as steering_ops  # noqa: E402
from tests import client_ops as watch  # noqa: E402
from tests.webhook_support import Receiver  # noqa: E402

OUT = ROOT / "tests" / "histories"
_KEY = Ed25519PrivateKey.generate()
TASK = "Look up our refund policy and notify ana@example.com about it."
Scenario = Callable[[Client, str], Awaitable[None]]


async def wait_pending(client: Client, run_id: str) -> PendingApproval:
    for _ in range(300):
        if pending := (await ops.status(client, run_id)).pending_approval:
            return pending
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{run_id} never reached its approval gate")


async def approved_with_edit(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.approve(client, run_id, by="li", role="approver", edit={"body": "Edited."})


async def two_people_approve(client: Client, run_id: str) -> None:
    """A call that needs two approvers: li's approval edits it (a merge patch), and is
    counted; mo's, the second, runs it."""
    await wait_pending(client, run_id)
    li, mo = Identity.of_key("history-li", "li"), Identity.of_key("history-mo", "mo")
    counted = await ops.approve(
        client, run_id, by="li", role="approver", edit={"body": "By li."}, decider=li
    )
    assert counted.decision == "counted", counted
    await ops.approve(client, run_id, by="mo", role="approver", decider=mo)


async def approved_with_replacement(client: Client, run_id: str) -> None:
    pending = await wait_pending(client, run_id)
    arguments = {**pending.arguments, "body": "Replaced whole."}
    await ops.approve(client, run_id, by="li", role="approver", replace=arguments)


async def approved_then_by_standing_rule(client: Client, run_id: str) -> None:
    """Generation 6, a tenant whose policy lets approvers grant standing approvals: the
    first send finds no rule and waits; li grants one and approves it; the second send is
    approved by the rule, without waiting. The tenant has a notification webhook (a
    receiver that answers 500 once): the run's notifier tells it each approval and the end
    (its history is recorded too, as NAME_notifier)."""
    await WebhookStore(POOLS[0]).subscribe(
        subscription_id=f"{STANDING_TENANT}.ops",
        tenant=STANDING_TENANT,
        run_id=None,
        name="ops",
        url=RECEIVER.url,
        secret="s" * 32,
    )
    # From the run's first event (the run's first notice would start it too: the same one).
    await client.start_workflow(
        RunNotifierWorkflow.run,
        RunNotifierInput(tenant=STANDING_TENANT, run_id=run_id),
        id=run_notifier_id(run_id),
        task_queue=QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    await wait_pending(client, run_id)
    now = datetime.now(UTC)
    rule = StandingApproval(
        rule_id="sa-history",
        tenant=STANDING_TENANT,
        tool="send_message",
        when='to == "ana@example.com"',
        granted_by=Identity.of_key("history-li", "li"),
        granter_roles=["approver"],
        granted_at=now,
        expires_at=now + timedelta(hours=1),
    )
    await StandingStore(POOLS[0]).grant(rule)
    await ops.approve(client, run_id, by="li", role="approver")


async def rejected(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.reject(client, run_id, by="li", role="approver", reason="wrong customer")


async def paused_and_resumed(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.control(client, run_id, "pause")
    await ops.approve(client, run_id, by="li", role="approver")
    for _ in range(300):
        if (await ops.status(client, run_id)).status.value == "paused":
            break
        await asyncio.sleep(0.1)
    await ops.control(client, run_id, "resume")


async def _until(probe: Callable[[], Awaitable[Any]], what: str) -> Any:
    for _ in range(600):
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise RuntimeError(f"never saw {what}")


async def subagent_paused_and_approved(client: Client, run_id: str) -> None:
    """The parent is paused while its child works (the pause reaches the child), resumed,
    and the child's approval (which its parent shows) is given on the child."""

    async def child() -> str | None:
        return next(iter((await ops.status(client, run_id)).children), None)

    child_id = await _until(child, "a child")
    await ops.control(client, run_id, "pause", by="history")

    async def child_paused() -> bool:
        return (await ops.status(client, child_id)).status.value == "paused"

    await _until(child_paused, "the child paused")
    await ops.control(client, run_id, "resume", by="history")

    async def shown() -> bool:
        return bool((await ops.status(client, run_id)).child_approvals)

    await _until(shown, "the child's approval in its parent")
    await ops.approve(client, child_id, by="li", role="approver")


async def terminated_holding_slot(client: Client, run_id: str) -> None:
    """The run holding the tenant's only slot is terminated; the queue's sweep frees the
    slot for the run waiting behind it, which is approved and completes."""
    await wait_pending(client, run_id)
    spec = RunSpec(task=TASK, tenant="swept", idempotency_key="history-swept-second")
    second = await ops.start_run(
        client, spec, task_queue="record-histories", limits=LIMITS["terminated_holding_slot"]
    )
    await client.get_workflow_handle(run_id).terminate("recording: a stuck run")
    await approved_with_edit(client, second.run_id)
    await client.get_workflow_handle(second.run_id).result()


async def watched(client: Client, run_id: str) -> None:
    """Approved while a watcher follows it: its polls are queries (nothing in history), and
    since generation 6 the model's text goes over Postgres (no stream signal either)."""

    async def follow() -> None:
        async for _ in watch.watch(client, run_id):
            pass

    watcher = asyncio.create_task(follow())
    await approved_with_edit(client, run_id)
    await watcher


async def rated_midway(client: Client, run_id: str) -> None:
    """The tenant gets a model-call rate while the run waits for its approval: the next
    model call, on the run's own queue, is refused for it and made on the model queue."""
    await wait_pending(client, run_id)
    await ops.set_tenant(
        client, POOLS[0], RATED_TENANT, {"model_calls_per_second": 100.0}, task_queue=QUEUE
    )
    await asyncio.sleep(RATED_TENANTS_SECONDS * 2)  # the worker reads the rates this often
    await ops.approve(client, run_id, by="li", role="approver")


async def cancelled(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.cancel(client, run_id)


async def steered(client: Client, run_id: str) -> None:
    """A message said while the first (slow) model call is in flight: read at the next call
    (on_message: queue), or the call cancelled for it (interrupt)."""
    for _ in range(300):
        if (await ops.status(client, run_id)).steps:
            break
        await asyncio.sleep(0.1)
    await steering_ops.say(client, run_id, SAID, by="ana")


async def session_turns(client: Client, run_id: str) -> None:
    """A session: its task answered, then two messages, each a turn; after the second the
    first is summarised and the session continues as new; idle, it completes."""

    async def answered(turns: int) -> bool:
        state = await ops.status(client, run_id)
        done = [t for t in state.turns if t.answered_at is not None]
        return len(done) >= turns and state.status.value == "waiting_for_message"

    async def compacted() -> bool:
        return any(s.name == "summary" for s in (await ops.status(client, run_id)).steps)

    await _until(lambda: answered(1), "turn 1")
    await steering_ops.say(client, run_id, "What about exchanges?", by="ana")
    await _until(lambda: answered(2), "turn 2")
    await _until(compacted, "the compaction")
    await _until(lambda: answered(2), "the continuation")
    await steering_ops.say(client, run_id, "And gift cards?", by="ana")
    await _until(lambda: answered(3), "turn 3")


async def session_left_in_mirror(client: Client, run_id: str) -> None:
    """A session past its windows: 24 messages in its second turn, then eleven
    turns of one, compacting every second; its continuations carry only the latest turns,
    messages and steps (`left_in_mirror`), and, idle, it completes."""

    async def answered(turn: int) -> bool:
        state = await ops.status(client, run_id)
        last = state.turns[-1] if state.turns else None
        return (
            last is not None
            and last.turn >= turn
            and last.answered_at is not None
            and state.status.value == "waiting_for_message"
        )

    await _until(lambda: answered(1), "turn 1")
    for n in range(24):
        await steering_ops.say(client, run_id, f"Note {n} about exchanges.", by="ana")
    await _until(lambda: answered(2), "turn 2")
    for turn in range(3, 14):
        await steering_ops.say(client, run_id, f"And question {turn}?", by="ana")
        await _until(lambda: answered(turn), f"turn {turn}")  # noqa: B023 (awaited at once)
    await _until(lambda: _left_in_mirror(client, run_id), "turns left in the mirror")


async def _left_in_mirror(client: Client, run_id: str) -> bool:
    return (await ops.status(client, run_id)).left_in_mirror.turns > 0


async def session_paused_and_ended(client: Client, run_id: str) -> None:
    """A session paused while idle, a message said meanwhile, resumed (the message's turn);
    paused while idle again and ended (`agentledger end`) while paused: it completes."""

    async def shows(status: str, turns: int) -> bool:
        state = await ops.status(client, run_id)
        done = [t for t in state.turns if t.answered_at is not None]
        return len(done) >= turns and state.status.value == status

    await _until(lambda: shows("waiting_for_message", 1), "turn 1")
    await ops.control(client, run_id, "pause", by="ana")
    await _until(lambda: shows("paused", 1), "the idle pause")
    await steering_ops.say(client, run_id, "What about exchanges?", by="bo")
    await ops.control(client, run_id, "resume", by="ana")
    await _until(lambda: shows("waiting_for_message", 2), "turn 2")
    await ops.control(client, run_id, "pause", by="ana")
    await _until(lambda: shows("paused", 2), "the second idle pause")
    await steering_ops.end_session(client, run_id, by="ana")


async def finishes_alone(client: Client, run_id: str) -> None:
    """Nothing to decide: the run goes to its end by itself."""


async def _turns_over(client: Client, run_id: str, turns: int) -> bool:
    """Whether the session is idle after `turns` turns, answered or cut short."""
    state = await ops.status(client, run_id)
    over = [t for t in state.turns if t.answered_at is not None or t.ended is not None]
    return len(over) >= turns and state.status.value == "waiting_for_message"


async def _model_call_in_flight(client: Client, run_id: str) -> bool:
    steps = (await ops.status(client, run_id)).steps
    return any(s.type == "model_call" and s.status == "running" for s in steps)


async def double_texted(client: Client, run_id: str) -> None:
    """A message said while the turn's slow model call is in flight, as the session's own
    double-texting policy says (refused under reject: then said again once it is idle);
    the session answers it in its next turn, and is ended."""
    await _until(lambda: _model_call_in_flight(client, run_id), "the slow model call")
    try:
        await steering_ops.say(client, run_id, "And exchanges?", by="ana")
    except OperationError:  # reject: the run recorded the refusal
        await _until(lambda: _turns_over(client, run_id, 1), "the first turn")
        await steering_ops.say(client, run_id, "And exchanges?", by="ana")
    await _until(lambda: _turns_over(client, run_id, 2), "the next turn")
    await steering_ops.end_session(client, run_id, by="ana")


async def rolled_back(client: Client, run_id: str) -> None:
    """A ticket filed, then, while the slow call after it is in flight, a message that
    rolls the turn back; its turn answers, and the session is ended."""

    async def filed() -> bool:
        steps = (await ops.status(client, run_id)).steps
        return any(s.name == "create_ticket" and s.status == "completed" for s in steps)

    await _until(filed, "the ticket filed")
    await _until(lambda: _model_call_in_flight(client, run_id), "the slow model call")
    await steering_ops.say(client, run_id, "What is our refund policy?", by="ana")
    await _until(lambda: _turns_over(client, run_id, 2), "the next turn")
    await steering_ops.end_session(client, run_id, by="ana")


async def quarantine_released(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.approve(client, run_id, by="li", role="approver")


# A keyed approver for the signed scenario, made afresh: replay needs no private key.
SIGNER = approver_keys.ApproverKey(
    Signer(
        name="li",
        role="approver",
        public_key=approval_signatures.public_key_text(_KEY.public_key()),
        key_id=approval_signatures.key_id(_KEY.public_key().public_bytes_raw()),
    ),
    _KEY,
)


async def signed_after_a_refusal(client: Client, run_id: str) -> None:
    """An unsigned decision refused (and recorded by the run), then a signed one applied."""
    await wait_pending(client, run_id)
    try:
        await ops.approve(client, run_id, by="li", role="approver")
    except OperationError:
        pass
    await ops.approve(client, run_id, by="li", role="approver", signer=SIGNER)


async def budget_extended(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.approve(client, run_id, by="li", role="approver", edit={"max_tokens": 100_000})


class Post(BaseModel):
    text: str


POSTED: list[str] = []


async def post_webhook(args: Post, ctx: ToolContext) -> dict[str, str]:
    """An external effect with no reconcile hook whose first request goes out and then
    loses its connection: the next attempt cannot tell whether it happened."""
    POSTED.append(args.text)
    if len(POSTED) == 1:
        raise ConnectionResetError("connection reset after the request was sent")
    return {"posted": args.text}


REGISTRY = ToolRegistry(
    [
        *agentledger.demo.registry.tools(),
        Tool("post_webhook", "post", Post, post_webhook, side_effect=True, transactional=False),
    ]
)


BUDGET_TASK = "Look up our refund policy (on a budget)."
DT_TASK = "Tell me about refunds, slowly."
DT_TICKET = {"title": "Refund 42", "body": "Please refund order 42."}
DT_TICKET_TASK = f"call create_ticket {json.dumps(DT_TICKET)} (double-texted)"


def dt_session(policy: str, task: str) -> RunSpec:
    return RunSpec(
        task=task,
        allowed_tools=["search_notes", "create_ticket"],
        session={"idle_timeout": 3600},
        double_texting=policy,  # type: ignore[arg-type]
    )


FORUM_TASK = "Read the forum post and summarize it."
STANDING_TENANT = "standing"
RECEIVER = Receiver(failures=1)  # the standing scenario's notification webhook
STANDING_TASK = (
    'Send two notes: call send_message {"to": "ana@example.com", "subject": "One", "body": '
    '"First."} call send_message {"to": "ana@example.com", "subject": "Two", "body": '
    '"Second."}'
)
POST_TASK = "Post hello to the webhook."
LONG_TASK = "Search the notes twelve times."
# One scenario for every path a run takes, recorded from the current code (generation 6):
# tests/test_replay.py replays each, so a change that breaks any shape of open run fails CI.
# Histories of runs of older code stay as they were recorded (generation_5_*.json; the
# admission queues before and after the sweep); those that need a retired version branch are
# in tests/histories/archive/ (docs/versioning.md).
QUEUE = "record-histories"
POOLS: list[AsyncConnectionPool] = []  # the recording stack's Postgres, once it is up
RATED_TENANT = "rated"
STEER_TASK = "Summarize the refund policy (steered)."
SAID = "Only look at the 2025 policy."
SESSION_TASK = "Tell me about refunds (a session)."
LEAD_TASK = "Ask both helpers and report."
LEAD = Agent(name="lead", instructions="You lead.", subagents=["alpha", "beta"])
TEAM = {
    "lead": LEAD,
    "alpha": Agent(name="alpha", instructions="You are alpha.", tools=[]),
    "beta": Agent(name="beta", instructions="You are beta.", tools=[]),
}
SENDER_LEAD_TASK = "Ask the sender and report."
SENDER_TASK = "send job"
SENDER_LEAD = Agent(name="lead", instructions="You lead.", subagents=["sender"])
SENDER_TEAM = {
    "lead": SENDER_LEAD,
    "sender": Agent(name="sender", instructions="You send.", tools=["send_message"]),
}
# Scenarios whose first child run's history is recorded too, as NAME_child.
CHILD_HISTORIES = {"subagent_paused_and_approved"}
# Scenarios whose run's notifier's history is recorded too, as NAME_notifier.
NOTIFIER_HISTORIES = {"approved_by_standing_rule"}
SCENARIOS: dict[str, tuple[RunSpec, Scenario]] = {
    # A model call, tool calls, an approval with an edit.
    "approved_with_edit": (RunSpec(task=TASK), approved_with_edit),
    "rejected": (RunSpec(task=TASK), rejected),
    # Recorded at generation 6 (an edit is a merge patch or a replacement): the two-person
    # rule (one approval counted, then the second), a replacement, a call a rule denies.
    "two_people_approved": (
        RunInput(
            task=TASK,
            approval={"approvals_needed": 2, "requester_may_approve": False},
            requester=Identity.of_key("history-requester", "requester"),
        ),
        two_people_approve,
    ),
    "approved_with_replacement": (RunSpec(task=TASK), approved_with_replacement),
    # Generation 6, a tenant that lets approvers grant standing approvals: a call no rule
    # covers waits (decided by hand), the next is approved by the rule granted meanwhile.
    "approved_by_standing_rule": (
        RunInput(
            task=STANDING_TASK,
            tenant=STANDING_TENANT,
            tenant_policy=TenantPolicy(standing_tools=["send_message"]),
        ),
        approved_then_by_standing_rule,
    ),
    "denied_by_rule": (
        RunSpec(task=TASK, approval={"rules": [{"tool": "send_message", "deny": True}]}),
        finishes_alone,
    ),
    "paused_and_resumed": (RunSpec(task=TASK), paused_and_resumed),
    "cancelled": (RunSpec(task=TASK), cancelled),
    "quarantine_released": (
        RunSpec(task=FORUM_TASK, allowed_tools=["fetch_page"]),
        quarantine_released,
    ),
    "continued_as_new": (
        RunSpec(task=LONG_TASK, allowed_tools=["search_notes"], history_events_limit=100),
        finishes_alone,
    ),
    "budget_extended": (
        RunSpec(task="Summarize the invoice policy.", budget={"max_tokens": 50}),
        budget_extended,
    ),
    # A capped tenant's run, started through its admission queue (whose history is recorded
    # too, as admitted_from_queue_queue).
    "admitted_from_queue": (RunSpec(task=TASK, tenant="capped", priority=2), approved_with_edit),
    # The approval signed: the run verifies the signature in workflow code.
    "signed_approval": (
        RunSpec(task=TASK, approval={"signers": [SIGNER.signer.model_dump()]}),
        signed_after_a_refusal,
    ),
    # A watched run: the model's text streamed from the activity (over Postgres since
    # generation 6: no signal), a watcher's polls; then a fork of that run at its send
    # (step 5), edited.
    "watched_and_streamed": (RunSpec(task=TASK), watched),
    # Generation 6: model calls on the run's own queue until the tenant gets a rate; then
    # one refused there (`ModelCallsRated`) and the rest on the rate-limited queue.
    "model_calls_rated_midway": (RunSpec(task=TASK, tenant=RATED_TENANT), rated_midway),
    "forked_with_edit": (
        RunInput(
            task=TASK,
            fork=ForkOrigin(
                parent_run_id="run-history-watched_and_streamed",
                from_step=5,
                edit_output={"message_id": 1, "status": "sent (edited in the fork)"},
            ),
        ),
        finishes_alone,
    ),
    # The run holding the tenant's only slot is terminated; the queue's sweep frees it.
    "terminated_holding_slot": (RunSpec(task=TASK, tenant="swept"), terminated_holding_slot),
    # An unknown outcome nobody decided in time: the run fails naming it.
    "unknown_outcome_expired": (
        RunSpec(task=POST_TASK, allowed_tools=["post_webhook"], approval={"timeout_seconds": 2}),
        finishes_alone,
    ),
    # Recorded after runs could be steered: a message said during a slow model
    # call, taken before the next call (queue) or cancelling the call (interrupt).
    "steered_queue": (RunSpec(task=STEER_TASK, allowed_tools=["search_notes"]), steered),
    "steered_interrupt": (
        RunSpec(task=STEER_TASK, allowed_tools=["search_notes"], on_message="interrupt"),
        steered,
    ),
    # Recorded after runs could delegate to sub-agents: two child runs.
    "subagents": (LEAD.spec(LEAD_TASK, agents=TEAM), finishes_alone),
    # A pause of the parent forwarded to its child, and the child's approval shown in the
    # parent (a signal from the child); the child's history too.
    "subagent_paused_and_approved": (
        SENDER_LEAD.spec(SENDER_LEAD_TASK, agents=SENDER_TEAM),
        subagent_paused_and_approved,
    ),
    # Recorded after sessions: three turns, a summary and a continue-as-new
    # between the second and the third (its first run's history too), the idle end.
    "session_compacted": (
        RunSpec(
            task=SESSION_TASK,
            allowed_tools=[],
            session={"idle_timeout": 5, "compact_after_turns": 2},
        ),
        session_turns,
    ),
    # Recorded after a session's carry was bounded: turns, messages and steps
    # dropped from its state at continue-as-new (its first run's history too), the idle end.
    "session_left_in_mirror": (
        RunSpec(
            task=SESSION_TASK,
            allowed_tools=[],
            session={"idle_timeout": 5, "compact_after_turns": 2},
        ),
        session_left_in_mirror,
    ),
    # Recorded after `agentledger end` and the idle pause: paused while idle, a
    # message held for the resume, then ended while paused.
    "session_paused_and_ended": (
        RunSpec(task=SESSION_TASK, allowed_tools=[], session={"idle_timeout": 3600}),
        session_paused_and_ended,
    ),
    # Generation 6 (issue 50): a tenant's enforcing budget (BUDGETS). Its first run is told
    # to wrap up at its first call (there is room for that one call only) and answers; the
    # next, recorded after it, ends `budget_exhausted` at its first call.
    "budget_wrapped_up": (RunSpec(task=BUDGET_TASK, tenant="budgeted"), finishes_alone),
    "budget_exhausted": (RunSpec(task=BUDGET_TASK, tenant="budgeted"), finishes_alone),
    # Double-texting: a message said while a session's slow turn is in flight, under each
    # policy; under rollback, after the turn filed a ticket (a side effect, kept).
    "session_double_text_rejected": (dt_session("reject", DT_TASK), double_texted),
    "session_double_text_enqueued": (dt_session("enqueue", DT_TASK), double_texted),
    "session_double_text_interrupted": (dt_session("interrupt", DT_TASK), double_texted),
    "session_double_text_rolled_back": (dt_session("rollback", DT_TICKET_TASK), rolled_back),
    # Recorded once the engine chose local read-only tools for new runs (the scenarios above
    # were recorded before, each input saying false): each search runs as a local activity,
    # a marker in history, beside an approved call, a cancel, and eleven more searches
    # (twelve markers in a history still under the continue-as-new limit).
    "local_tools_approved_with_edit": (RunSpec(task=TASK), approved_with_edit),
    "local_tools_cancelled": (RunSpec(task=TASK), cancelled),
    "local_tools_twelve_searches": (
        RunSpec(task=LONG_TASK, allowed_tools=["search_notes"], history_events_limit=100),
        finishes_alone,
    ),
}
# Budgets set before the scenarios run (agentledger/core/budgets.py): the schedule's tenant's
# is advisory (its fire's run raises both alerts, delivered to ALERT_RECEIVER); the spent one's
# enforcing budget was spent before the fire.
BUDGETS = [
    BudgetLimit(tenant="budgeted", period="day", tokens=1, mode="enforcing"),
    BudgetLimit(tenant="scheduled", period="day", tokens=1, mode="advisory"),
    BudgetLimit(tenant="spent", period="day", tokens=1, mode="enforcing"),
]
ALERT_RECEIVER = Receiver()
# A schedule's fires (agentledger/workflows/scheduled_fires.py), each fired once by its
# Temporal Schedule: a fire whose run ran to its end, and one whose tenant's enforcing budget
# was spent (no run; the fire records why). The first's run raises the budget alerts of its
# tenant's advisory budget: the `budget_alert` history, delivered to its webhook.
FIRES = {"schedule_fire_ended": "scheduled", "schedule_fire_skipped": "spent"}


async def prepare(pool: AsyncConnectionPool) -> None:
    for limit in BUDGETS:
        await BudgetStore(pool).save(limit)
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO model_journal (run_id, step_id, attempt, model, response, tokens_in,"
            " tokens_out, cost_usd, tenant) VALUES ('run-spent', 's', 1, 'm', '{}', 5, 5, 0,"
            " 'spent')"
        )
    await WebhookStore(pool).subscribe(
        subscription_id="scheduled.alerts",
        tenant="scheduled",
        run_id=None,
        name="alerts",
        url=ALERT_RECEIVER.url,
        secret="history",
    )


async def record_fire(client: Client, task_queue: str, name: str, tenant: str) -> None:
    """Fire the schedule `name` of `tenant` once; write its fire workflow's history."""
    spec = RunInput(task=TASK.replace(" and notify ana@example.com about it", ""), tenant=tenant)
    fire = FireInput(tenant=tenant, schedule=name, spec=spec, charged_to=f"schedule:{name}")
    schedule = await client.create_schedule(
        schedule_id(tenant, name),
        Schedule(
            action=ScheduleActionStartWorkflow(
                ScheduledFireWorkflow.run,
                fire,
                id=fire_workflow_id(tenant, name),
                task_queue=task_queue,
            ),
            spec=ScheduleSpec(),
            state=ScheduleState(paused=True),
        ),
    )
    await schedule.trigger()

    async def fired() -> str | None:
        query = f"WorkflowId STARTS_WITH '{fire_workflow_id(tenant, name)}'"
        return next(iter([each.id async for each in client.list_workflows(query)]), None)

    handle = client.get_workflow_handle(await _until(fired, f"{name}'s fire"))
    await handle.result()
    await schedule.delete()
    history = await handle.fetch_history()
    (OUT / f"{name}.json").write_text(history.to_json())
    print(f"recorded {name}: {len(history.events)} events")


async def record_fires(client: Client, task_queue: str, force: bool) -> None:
    for name, tenant in FIRES.items():
        if force or not (OUT / f"{name}.json").exists():
            await record_fire(client, task_queue, name, tenant)
    path = OUT / "budget_alert.json"
    if path.exists() and not force:
        return

    async def alerted() -> list[str]:
        query = f"WorkflowType = '{BUDGET_ALERT_WORKFLOW_NAME}'"
        return [each.id async for each in client.list_workflows(query) if "scheduled" in each.id]

    alert = client.get_workflow_handle((await _until(alerted, "a budget alert"))[0])
    await alert.result()
    history = await alert.fetch_history()
    path.write_text(history.to_json())
    print(f"recorded budget_alert: {len(history.events)} events")


async def record_redelivery(client: Client, task_queue: str, force: bool) -> None:
    """A recorded delivery made again on request (`notifications redeliver`): one signed
    delivery to its webhook (the standing scenario's receiver)."""
    path = OUT / "webhook_redelivered.json"
    if path.exists() and not force:
        return
    await WebhookStore(POOLS[0]).subscribe(
        subscription_id="redelivered.ops",
        tenant="redelivered",
        run_id=None,
        name="ops",
        url=RECEIVER.url,
        secret="r" * 32,
    )
    again = DeliveryInput(
        delivery_id="redelivered.ops#run-redelivered~r#4",
        subscription_id="redelivered.ops",
        tenant="redelivered",
        run_id="run-redelivered~r",
        event="run.finished",
        body={"event": "run.finished", "run_id": "run-redelivered~r", "status": "completed"},
    )
    handle = await client.start_workflow(
        RedeliveryWorkflow.run, again, id="history-redelivery", task_queue=task_queue
    )
    await handle.result()
    history = await handle.fetch_history()
    path.write_text(history.to_json())
    print(f"recorded webhook_redelivered: {len(history.events)} events")


# Scenarios whose tenant has limits: their runs start through the tenant's admission queue.
LIMITS = {
    "admitted_from_queue": TenantLimits(tenant="capped", max_in_flight=1, max_queued=5),
    "terminated_holding_slot": TenantLimits(tenant="swept", max_in_flight=1),
}
# Queues started before their first run, to sweep every second rather than every minute.
SWEEP_SECONDS = {"terminated_holding_slot": 1.0}


def model_for_scenarios(request: dict[str, Any]) -> Reply:
    """The offline planner, except that the forum task reads the forum page first."""
    if request["messages"][0]["content"] == SUMMARY_PROMPT:
        return completion(request, content="They asked about refunds and exchanges.")
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    if task == SESSION_TASK:
        asked = [m["content"] for m in request["messages"] if m["role"] == "user"][-1]
        return completion(request, content=f"## Summary\nAnswer to: {asked}")
    if task == FORUM_TASK:
        if not any(m["role"] == "tool" for m in request["messages"]):
            url = "https://example.com/forum/post-7"
            return completion(request, tool_calls=[("fetch_page", {"url": url})])
        return completion(request, content="## Summary\nThe post is spam.")
    if task == LONG_TASK:
        done = sum(1 for m in request["messages"] if m["role"] == "tool")
        if done < 12:
            return completion(request, tool_calls=[("search_notes", {"query": f"refund {done}"})])
        return completion(request, content="## Summary\nSearched twelve times.")
    if task == LEAD_TASK:
        results = [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]
        if not results:
            calls = [("agent__alpha", {"task": "alpha job"}), ("agent__beta", {"task": "beta job"})]
            return completion(request, tool_calls=calls)
        said = "; ".join(str(r.get("answer") or r.get("error")) for r in results)
        return completion(request, content=f"## Summary\n{said}")
    if task == SENDER_LEAD_TASK:
        if not any(m["role"] == "tool" for m in request["messages"]):
            return completion(request, tool_calls=[("agent__sender", {"task": SENDER_TASK})])
        return completion(request, content="## Summary\nThe sender sent it.")
    if task == SENDER_TASK:
        if not any(m["role"] == "tool" for m in request["messages"]):
            args = {"to": "ana@example.com", "subject": "Hi", "body": "Hello."}
            reply = completion(request, tool_calls=[("send_message", args)])
            reply.delay_seconds = 3.0
            return reply
        return completion(request, content="## Summary\nSent.\n## Actions\nsent it")
    if task in ("alpha job", "beta job"):
        return completion(request, content=f"## Summary\n{task} done")
    if task == STEER_TASK:
        if any(SAID in str(m["content"]) for m in request["messages"] if m["role"] == "user"):
            return completion(request, content=f"## Summary\nHeard: {SAID}")
        if not any(m["role"] == "tool" for m in request["messages"]):
            reply = completion(request, tool_calls=[("search_notes", {"query": "refund"})])
            reply.delay_seconds = 3.0
            return reply
        return completion(request, content="## Summary\nNothing was said.")
    if task == POST_TASK:
        return completion(request, tool_calls=[("post_webhook", {"text": "hello"})])
    reply = offline_planner(request)
    last = request["messages"][-1]
    if task == DT_TASK and len(request["messages"]) == 2:  # the session's first call, slow
        reply.delay_seconds = 3.0
    if task == DT_TICKET_TASK and last["role"] == "tool" and "ticket_id" in str(last["content"]):
        reply.delay_seconds = 3.0  # the call after the ticket, slow
    return reply


async def main(force: bool) -> None:
    task_queue = QUEUE
    async with recording_worker(model_for_scenarios, task_queue, REGISTRY, POOLS) as client:
        await prepare(POOLS[0])
        OUT.mkdir(parents=True, exist_ok=True)
        for name, (base, scenario) in SCENARIOS.items():
            path = OUT / f"{name}.json"
            if path.exists() and not force:
                continue
            spec = base.model_copy(update={"idempotency_key": f"history-{name}"})
            limits = LIMITS.get(name)
            if name in SWEEP_SECONDS and limits is not None:
                await client.start_workflow(
                    TenantAdmissionWorkflow.run,
                    AdmissionInput(
                        tenant=limits.tenant, limits=limits, sweep_seconds=SWEEP_SECONDS[name]
                    ),
                    id=admission_id(limits.tenant),
                    task_queue=task_queue,
                )
            started = await ops.start_run(client, spec, task_queue=task_queue, limits=limits)
            await scenario(client, started.run_id)
            handle = client.get_workflow_handle(started.run_id)
            try:
                await handle.result()
            except Exception:  # a cancelled run ends as an error: its history is fine
                pass
            history = await handle.fetch_history()
            path.write_text(history.to_json())
            print(f"recorded {name}: {len(history.events)} events")
            if name in NOTIFIER_HISTORIES:
                notifier = client.get_workflow_handle(run_notifier_id(started.run_id))
                await notifier.result()
                history = await notifier.fetch_history()
                (OUT / f"{name}_notifier.json").write_text(history.to_json())
                print(f"recorded {name}_notifier: {len(history.events)} events")
            if name in CHILD_HISTORIES:
                [child_id, *_] = (await ops.status(client, started.run_id)).children
                history = await client.get_workflow_handle(child_id).fetch_history()
                (OUT / f"{name}_child.json").write_text(history.to_json())
                print(f"recorded {name}_child: {len(history.events)} events")
            started_event = history.events[0].workflow_execution_started_event_attributes
            if started_event.continued_execution_run_id:  # and the run that continued as new
                first = client.get_workflow_handle(
                    started.run_id, run_id=started_event.continued_execution_run_id
                )
                history = await first.fetch_history()
                (OUT / f"{name}_first_run.json").write_text(history.to_json())
                print(f"recorded {name}_first_run: {len(history.events)} events")
            if limits is not None:  # the queue runs on; its history so far replays too
                queue = client.get_workflow_handle(admission_id(limits.tenant))
                history = await queue.fetch_history()
                (OUT / f"{name}_queue.json").write_text(history.to_json())
                print(f"recorded {name}_queue: {len(history.events)} events")
        await record_fires(client, task_queue, force)
        await record_redelivery(client, task_queue, force)


if __name__ == "__main__":
    with RECEIVER, ALERT_RECEIVER:
        asyncio.run(main(force="--force" in sys.argv))
