"""Local read-only tools: a tool with no side effect and low risk runs as a local activity (a
marker in history, no task of its own) unless the run's agent's profile or its spec turns
that off; any other tool stays an activity of its own. The engine records its choice in the
run's input when the run starts, so the choice replays, and a run whose input lacks it (one
started before the engine chose) keeps every tool an activity of its own."""

from __future__ import annotations

import json

from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError, TimeoutError

from agentledger.core import errors
from agentledger.core._state import RunInput
from agentledger.core.admission_models import TenantLimits
from agentledger.core.constants import ACTIVITY_TOOL_INVOKE
from agentledger.core.spec import RiskLevel, RunSpec
from agentledger.core.tenant_policy import RunPolicy, resolve
from agentledger.core.wire import ProposedToolCall
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.profiles import Agent
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.changes import for_new_run
from agentledger.workflows.policies import runs_locally
from tests import client_ops as ops
from tests.support import make_spec, rows, scripted

SUMMARY = "## Summary\nThe refund policy allows 30 days."
CALLS = [
    ("search_notes", {"query": "refund policy"}),  # read-only, low risk
    ("index_documents", {"documents": ["a", "b"]}),  # no side effect, but medium risk
]


async def run_and_history(client, settings, worker, **fields):
    with OfflineModelServer(scripted(CALLS, SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            spec = make_spec("Find the refund policy.", **fields)
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
            history = await handle.fetch_history()
            state = await ops.status(client, started.run_id)  # as `agentledger status` reads it
    return started.run_id, result, history, state


def tools_scheduled(history) -> list[str]:
    """The tools the run scheduled as activities of their own."""
    tools = []
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name == ACTIVITY_TOOL_INVOKE:
            tools.append(json.loads(attrs.input.payloads[0].data)["tool"])
    return tools


def local_tool_markers(history) -> int:
    """The tool calls the run made as local activities."""
    found = 0
    for e in history.events:
        attrs = e.marker_recorded_event_attributes
        if e.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
            continue
        if attrs.marker_name == "core_local_activity":
            data = json.loads(attrs.details["data"].payloads[0].data)
            found += data["activity_type"] == ACTIVITY_TOOL_INVOKE
    return found


def recorded_choice(history) -> bool | None:
    """What the run's input says (the engine's choice, recorded when it started)."""
    started = history.events[0].workflow_execution_started_event_attributes
    return json.loads(started.input.payloads[0].data)["local_read_only_tools"]


async def test_a_new_run_runs_read_only_low_risk_tools_locally_by_default(
    client, settings, pool, worker
):
    run_id, result, history, state = await run_and_history(client, settings, worker)
    assert result.status.value == "completed", result.error
    assert recorded_choice(history) is True, "the engine's choice is in the run's input"
    assert tools_scheduled(history) == ["index_documents"], "medium risk stays an activity"
    assert local_tool_markers(history) == 1
    steps = await rows(
        pool,
        "SELECT name, status, attempt, output, final FROM steps "
        "WHERE run_id = %s AND type = 'tool_call' ORDER BY seq",
        run_id,
    )
    assert [(s["name"], s["status"], s["attempt"], s["final"]) for s in steps] == [
        ("search_notes", "completed", 1, True),
        ("index_documents", "completed", 1, True),
    ]
    assert "refund" in json.dumps(steps[0]["output"]).lower(), "the mirror has its output"
    # What people read of the run says the same of the local step as of the other.
    tool_steps = [(s.name, s.status.value) for s in state.steps if s.type == "tool_call"]
    assert tool_steps == [("search_notes", "completed"), ("index_documents", "completed")]
    receipt = await ops.receipt(pool, run_id)
    named = json.dumps(receipt)
    assert "search_notes" in named and "index_documents" in named


async def test_a_spec_that_turns_them_off_runs_every_tool_as_an_activity_of_its_own(
    client, settings, pool, worker
):
    _, result, history, _ = await run_and_history(
        client, settings, worker, local_read_only_tools=False
    )
    assert result.status.value == "completed", result.error
    assert recorded_choice(history) is False
    assert tools_scheduled(history) == ["search_notes", "index_documents"]
    assert local_tool_markers(history) == 0


def call(tool: str = "search_notes", *, side_effect: bool = False, risk: str = "low", local=True):
    return ProposedToolCall(
        call_id="c1",
        tool=tool,
        arguments={},
        side_effect=side_effect,
        risk=RiskLevel(risk),
        local=local,
    )


def test_a_run_whose_input_lacks_the_choice_keeps_every_tool_an_activity():
    recorded = RunSpec(task="t").model_dump(mode="json", exclude={"local_read_only_tools"})
    older = RunInput.model_validate({**recorded, "workflow_generation": 6})
    assert older.local_read_only_tools is None
    assert not runs_locally(older, call())
    new = for_new_run(RunSpec(task="t"))
    assert new.local_read_only_tools is True and runs_locally(new, call())
    # Only a read-only, low-risk call runs locally; the choice a spec made is kept.
    assert not runs_locally(new, call(side_effect=True))
    assert not runs_locally(new, call(risk="medium"))
    assert not runs_locally(new, call(local=False)), "a tool that may take seconds says so"
    assert (
        for_new_run(RunSpec(task="t", local_read_only_tools=False)).local_read_only_tools is False
    )


def test_a_profile_turns_them_off_and_a_spec_cannot_turn_them_back_on():
    found = RunPolicy(limits=TenantLimits(tenant="default"))
    off = Agent(name="careful", instructions="i", local_read_only_tools=False)
    on = Agent(name="quick", instructions="i")
    profiles = {a.name: a.spec_fields() for a in (off, on)}
    admin = frozenset({"admin"})

    def chosen(agent: str, **fields: object) -> bool | None:
        spec = RunSpec(task="t", agent=agent, **fields)
        run = resolve(spec, found, roles=admin, profiles=profiles)
        return for_new_run(run).local_read_only_tools

    assert chosen("careful") is False
    assert chosen("careful", local_read_only_tools=True) is False, "a spec never loosens"
    assert chosen("quick") is True
    assert chosen("quick", local_read_only_tools=False) is False, "a spec may tighten"
    # A profile that leaves it at its default hashes as it did before the field existed.
    assert on.profile_hash() != off.profile_hash()
    assert on.profile_hash() == Agent(name="quick", instructions="i").profile_hash()


def test_a_local_calls_final_failure_reads_as_a_remote_calls():
    """The SDK hands a local activity's final failure to the workflow bare; the tool step reads
    it as the ActivityError a remote call's would be: its kind, its cause, its attempts."""
    forbidden = ApplicationError("no", {"attempt": 1}, type="PermissionDenied", non_retryable=True)
    as_remote = errors.as_activity_error(forbidden, ACTIVITY_TOOL_INVOKE)
    assert errors.error_kind(as_remote) == "PermissionDenied" and errors.cause(as_remote) == "no"
    assert errors.attempts_made(as_remote, 5) == 1
    spent = errors.as_activity_error(ApplicationError("broke", type="RuntimeError"), "t")
    assert errors.attempts_made(spent, 5) == 5, "a retryable failure arrives once attempts ran out"
    timed_out = errors.as_activity_error(
        TimeoutError("slow", type=None, last_heartbeat_details=[]), "t"
    )
    assert errors.error_kind(timed_out) == "Timeout"
