"""Replays every committed history against today's workflow code: non-determinism fails CI.

The replay gate: one history recorded from the current code for every path a run takes
(PATHS), beside the histories of older code that open runs may still have (those needing a
retired version branch are in histories/archive/, refused by name: test_version_branches.py).

Record new histories with `python scripts/record_histories.py` after an intended change,
and keep the old ones: in-flight runs were started by the old code.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from agentledger.core._state import RunInput
from agentledger.core.constants import (
    ACTIVITY_MODEL_COMPLETE,
    BUDGET_ALERT_WORKFLOW_NAME,
    REDELIVERY_WORKFLOW_NAME,
    SCHEDULED_FIRE_WORKFLOW_NAME,
    SIGNAL_BACKLOG_ENQUEUE,
    SIGNAL_BACKLOG_RESUME,
    SIGNAL_BACKLOG_RETRY,
    SIGNAL_SAY,
)
from agentledger.core.wire import ModelCallResult
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.admission import SWEEPS_CLOSED_RUNS, TenantAdmissionWorkflow
from agentledger.workflows.backlog import CHILD_POLICY, CHILD_PRIORITY, AgentBacklogWorkflow
from agentledger.workflows.budget_alerts import BudgetAlertWorkflow
from agentledger.workflows.child_runs import READS_POLICY
from agentledger.workflows.evals import EvalWorkflow
from agentledger.workflows.redeliveries import RedeliveryWorkflow
from agentledger.workflows.run_notifier import RunNotifierWorkflow
from agentledger.workflows.scheduled_fires import ScheduledFireWorkflow
from tests.recorded import HISTORIES, recorded_history, replayer


def test_histories_are_committed():
    assert len(HISTORIES) >= 4, "record them with scripts/record_histories.py"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replay(path: Path):
    replaying = replayer(
        [
            AgentRunWorkflow,
            AgentBacklogWorkflow,
            TenantAdmissionWorkflow,
            EvalWorkflow,
            ScheduledFireWorkflow,
            BudgetAlertWorkflow,
            RunNotifierWorkflow,
            RedeliveryWorkflow,
        ]
    )
    await replaying.replay_workflow(recorded_history(path))


def patch_ids(path: Path) -> set[str]:
    """The patch ids a history's run took the new path of (its `core_patch` markers)."""
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    found = set()
    for event in history.events:
        marker = event.marker_recorded_event_attributes
        if marker.marker_name == "core_patch":
            found.add(json.loads(marker.details["patch-data"].payloads[0].data)["id"])
    return found


def test_the_admission_sweep_has_a_history():
    """A queue whose slot holder was terminated, swept free; older queues replay without."""
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert SWEEPS_CLOSED_RUNS not in taken["admission_queue_before_sweep"]
    assert SWEEPS_CLOSED_RUNS in taken["admission_queue_swept"]


def test_backlogs_from_before_and_after_child_priority_have_histories():
    """The retired `backlog-child-priority` patch: backlogs with its marker and without it
    replay on code that no longer asks it (a child's priority is not compared on replay)."""
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert "backlog-child-priority" not in taken["backlog_stop_resume_poison_retry"]
    assert "backlog-child-priority" in taken["backlog_child_priority"]


def test_backlog_children_under_their_tenants_policy_have_a_history():
    """Backlogs whose runs read their tenant's policy before they start, and
    those recorded before, which start them without."""
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert CHILD_POLICY not in taken["backlog_held_writes"]
    assert CHILD_POLICY in taken["backlog_tenant_policy"]


def test_backlog_held_writes_have_a_history():
    """The signals that carry backlog writes while no worker runs: enqueue (signal-with-start),
    resume and retry are recorded, so a change to how they apply fails the replay."""
    path = next(p for p in HISTORIES if p.stem == "backlog_held_writes")
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    signals = [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    assert signals == [SIGNAL_BACKLOG_ENQUEUE, SIGNAL_BACKLOG_RESUME, SIGNAL_BACKLOG_RETRY]


def test_histories_of_both_endings_replay():
    """A rejected run ends Canceled and a failed one Failed in Temporal, as agentledger says."""
    names = ("rejected", "unknown_outcome_expired")
    endings = {
        name: (started_input(events_of(name))["workflow_generation"], events_of(name)[-1])
        for name in (*names, *(f"generation_5_{name}" for name in names))
    }
    assert {name: (gen, last["eventType"]) for name, (gen, last) in endings.items()} == {
        "generation_5_rejected": (5, "EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED"),
        "generation_5_unknown_outcome_expired": (5, "EVENT_TYPE_WORKFLOW_EXECUTION_FAILED"),
        "rejected": (6, "EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED"),
        "unknown_outcome_expired": (6, "EVENT_TYPE_WORKFLOW_EXECUTION_FAILED"),
    }


def events_of(name: str) -> list[dict]:
    return json.loads((HISTORIES[0].parent / f"{name}.json").read_text())["events"]


def started_input(history: list[dict]) -> dict:
    payload = history[0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
    return json.loads(base64.b64decode(payload["data"]))


def kinds(history: list[dict]) -> set[str]:
    return {e["eventType"].removeprefix("EVENT_TYPE_") for e in history}


def activities(history: list[dict]) -> list[str]:
    return [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in history
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    ]


def local_activities(history: list[dict]) -> list[str]:
    """The activity types a history's local activity markers name."""
    names = []
    for e in history:
        marker = e.get("markerRecordedEventAttributes")
        if marker and marker["markerName"] == "core_local_activity":
            data = marker["details"]["data"]["payloads"][0]["data"]
            names.append(json.loads(base64.b64decode(data))["activity_type"])
    return names


def results(history: list[dict]) -> list[object]:
    """What each activity returned, decoded."""
    return [
        json.loads(base64.b64decode(payload["data"]))
        for e in history
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_COMPLETED"
        for payload in e["activityTaskCompletedEventAttributes"]
        .get("result", {})
        .get("payloads", [])
        if "data" in payload  # an activity that returned None
    ]


def approvals(history: list[dict]) -> int:
    """How many approve updates the run took."""
    return sum(
        1
        for e in history
        if "workflowExecutionUpdateAcceptedEventAttributes" in e
        and e["workflowExecutionUpdateAcceptedEventAttributes"]["acceptedRequest"]["input"]["name"]
        == "approve"
    )


def run_queue(history: list[dict]) -> str:
    return history[0]["workflowExecutionStartedEventAttributes"]["taskQueue"]["name"]


def model_call_queues(history: list[dict]) -> list[str]:
    """The task queue of each model call the run scheduled, in order."""
    return [
        e["activityTaskScheduledEventAttributes"]["taskQueue"]["name"]
        for e in history
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
        and e["activityTaskScheduledEventAttributes"]["activityType"]["name"] == "model.complete"
    ]


def failure_types(history: list[dict]) -> set[str]:
    """The application error types of the run's failed activities."""
    return {
        e["activityTaskFailedEventAttributes"]["failure"]["applicationFailureInfo"]["type"]
        for e in history
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_FAILED"
        and "applicationFailureInfo" in e["activityTaskFailedEventAttributes"]["failure"]
    }


def double_texted(name: str, policy: str) -> tuple[str, object]:
    """A session of `policy` that took a message while its turn was in flight."""
    return (
        name,
        lambda h: started_input(h)["double_texting"] == policy and SIGNAL_SAY in messages(h),
    )


def messages(history: list[dict]) -> set[str]:
    """The signals and updates a run took."""
    found = set()
    for e in history:
        if "workflowExecutionSignaledEventAttributes" in e:
            found.add(e["workflowExecutionSignaledEventAttributes"]["signalName"])
        if "workflowExecutionUpdateAcceptedEventAttributes" in e:
            accepted = e["workflowExecutionUpdateAcceptedEventAttributes"]["acceptedRequest"]
            found.add(accepted["input"]["name"])
    return found


# The replay gate: for every path a run takes, a history recorded from the current
# generation of the code (scripts/record_histories.py, scripts/record_backlog_history.py), so
# a change that breaks any shape of open run fails test_replay before it lands.
PATHS = {
    "model call": ("approved_with_edit", lambda h: "model.complete" in activities(h)),
    "tool call": ("approved_with_edit", lambda h: "tool.invoke" in activities(h)),
    "approval": ("approved_with_edit", lambda h: "approve" in messages(h)),
    "rejection": ("rejected", lambda h: "reject" in messages(h)),
    "pause": ("paused_and_resumed", lambda h: {"pause", "resume"} <= messages(h)),
    "cancel": ("cancelled", lambda h: "WORKFLOW_EXECUTION_CANCEL_REQUESTED" in kinds(h)),
    "fork": ("forked_with_edit", lambda h: "fork.seed" in activities(h)),
    "continue-as-new": (
        "continued_as_new_first_run",
        lambda h: "WORKFLOW_EXECUTION_CONTINUED_AS_NEW" in kinds(h),
    ),
    "continuation": ("continued_as_new", lambda h: started_input(h)["carry"] is not None),
    "admission": ("admitted_from_queue", lambda h: "admit_signal" in messages(h)),
    "admission queue": (
        "admitted_from_queue_queue",
        lambda h: "START_CHILD_WORKFLOW_EXECUTION_INITIATED" in kinds(h),
    ),
    "backlog": ("backlog_current", lambda h: "WORKFLOW_EXECUTION_CONTINUED_AS_NEW" in kinds(h)),
    # A tenant's own policy stops its tasks alone; it resumes its part (a signal).
    "backlog tenant's part": (
        "backlog_tenant_parts",
        lambda h: SIGNAL_BACKLOG_RESUME in messages(h),
    ),
    "backlog task run": (
        "backlog_current_task_run",
        lambda h: "parentWorkflowExecution" in h[0]["workflowExecutionStartedEventAttributes"],
    ),
    # Generation 6: the model's text goes to watchers over Postgres, never through the run.
    "watched stream": (
        "watched_and_streamed",
        lambda h: (
            "model.complete" in activities(h)
            and "__temporal_workflow_stream_publish" not in messages(h)
        ),
    ),
    # Generation 6: model calls on the run's own queue (eager), then, the tenant rated
    # midway, one refused there and the rest on the rate-limited model queue.
    "model call on the run's queue": (
        "approved_with_edit",
        lambda h: model_call_queues(h) and set(model_call_queues(h)) == {run_queue(h)},
    ),
    "model calls rated midway": (
        "model_calls_rated_midway",
        lambda h: (
            "ModelCallsRated" in failure_types(h)
            and model_call_queues(h)[-1] == run_queue(h) + "-model"
            and model_call_queues(h)[0] == run_queue(h)
        ),
    ),
    "budget extension": ("budget_extended", lambda h: "approve" in messages(h)),
    # Generation 6 (issue 50): a call told to wrap up as its tenant's budget runs out, a run
    # ended at the limit; a message said to a session's turn in flight, under each policy.
    "budget wrap-up": (
        "budget_wrapped_up",
        lambda h: any(isinstance(r, dict) and r.get("wrapped_up") for r in results(h)),
    ),
    "budget exhausted": ("budget_exhausted", lambda h: "BudgetExhausted" in failure_types(h)),
    "double-texting reject": double_texted("session_double_text_rejected", "reject"),
    "double-texting enqueue": double_texted("session_double_text_enqueued", "enqueue"),
    "double-texting interrupt": double_texted("session_double_text_interrupted", "interrupt"),
    "double-texting rollback": double_texted("session_double_text_rolled_back", "rollback"),
    # A schedule's fire: its run started as its child and waited for; a fire refused by its
    # tenant's spent budget (no child); a budget alert delivered to the tenant's webhook.
    "schedule fire": (
        "schedule_fire_ended",
        lambda h: (
            "START_CHILD_WORKFLOW_EXECUTION_INITIATED" in kinds(h)
            and "CHILD_WORKFLOW_EXECUTION_COMPLETED" in kinds(h)
        ),
    ),
    "schedule fire skipped": (
        "schedule_fire_skipped",
        lambda h: (
            "START_CHILD_WORKFLOW_EXECUTION_INITIATED" not in kinds(h)
            and any(isinstance(r, dict) and r.get("budget_refusal") for r in results(h))
        ),
    ),
    "budget alert": ("budget_alert", lambda h: "webhooks.deliver" in activities(h)),
    # A recorded delivery made again on request.
    "redelivery": ("webhook_redelivered", lambda h: "webhooks.deliver" in activities(h)),
    # Generation 6: one approval of two counted (the edit it carried a merge patch), then
    # the second; the arguments replaced whole; a call the run's rules deny.
    "two-person approval": ("two_people_approved", lambda h: approvals(h) == 2),
    "replacement": ("approved_with_replacement", lambda h: "approve" in messages(h)),
    "denied call": (
        "denied_by_rule",
        lambda h: any(r["deny"] for r in started_input(h)["approval"]["rules"]),
    ),
    "quarantine": ("quarantine_released", lambda h: "approve" in messages(h)),
    "signed approval": ("signed_approval", lambda h: "approve" in messages(h)),
    "unknown outcome": ("unknown_outcome_expired", lambda h: "tool.invoke" in activities(h)),
    # A new run's read-only, low-risk tools run as local activities (the engine's choice in
    # its input), beside an approved call that stays an activity of its own; runs started
    # before the engine chose (every history above) keep them activities.
    "local read-only tool": (
        "local_tools_approved_with_edit",
        lambda h: (
            started_input(h)["local_read_only_tools"] is True
            and "tool.invoke" in local_activities(h)
            and "tool.invoke" in activities(h)
            and "approve" in messages(h)
        ),
    ),
    "local read-only tools in a row": (
        "local_tools_twelve_searches",
        lambda h: local_activities(h).count("tool.invoke") == 12,
    ),
    "cancel after a local tool": (
        "local_tools_cancelled",
        lambda h: (
            "tool.invoke" in local_activities(h)
            and "WORKFLOW_EXECUTION_CANCEL_REQUESTED" in kinds(h)
        ),
    ),
    # An eval's cases as its child runs, continued as new between batches.
    "eval": (
        "eval_current",
        lambda h: (
            "START_CHILD_WORKFLOW_EXECUTION_INITIATED" in kinds(h)
            and "eval.diverged" in activities(h)
        ),
    ),
    "eval continue-as-new": (
        "eval_current_first_run",
        lambda h: "WORKFLOW_EXECUTION_CONTINUED_AS_NEW" in kinds(h),
    ),
}


# Workflows that have taken no version branch yet.
PATCHLESS = (SCHEDULED_FIRE_WORKFLOW_NAME, BUDGET_ALERT_WORKFLOW_NAME, REDELIVERY_WORKFLOW_NAME)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.replace(" ", "_"))
def test_every_path_has_a_history_from_the_current_generation(path: str):
    from agentledger.workflows.changes import CURRENT_GENERATION

    name, shows = PATHS[path]
    history = events_of(name)
    assert shows(history), f"{name}.json does not show the {path} path"
    kind = history[0]["workflowExecutionStartedEventAttributes"]["workflowType"]["name"]
    if kind == "AgentRun":
        assert started_input(history)["workflow_generation"] == CURRENT_GENERATION, name
    else:  # the long-lived workflows: recorded with the patches of today's code
        assert kind in ("TenantAdmission", "AgentBacklog", "AgentEval", *PATCHLESS), kind
        # Today's code still marks the deprecated CHILD_PRIORITY and READS_POLICY
        # (deprecate_patch).
        assert (
            patch_ids(HISTORIES[0].parent / f"{name}.json")
            - {
                CHILD_PRIORITY,
                READS_POLICY,
            }
            == {
                "TenantAdmission": {SWEEPS_CLOSED_RUNS},
                "AgentBacklog": {CHILD_POLICY},
                "AgentEval": set(),
                **{each: set() for each in PATCHLESS},
            }[kind]
        ), name


def test_a_reply_finished_by_the_workflow_has_a_history():
    """A reply streamed in part by its activity through the run's stream and finished by the
    workflow's own publish (`streamed_chars`; generation 5, model calls on the model queue),
    with a watcher's polls answered from it, replays."""
    path = HISTORIES[0].parent / "generation_5_watched_and_streamed.json"
    events = events_of(path.stem)
    assert started_input(events)["workflow_generation"] == 5
    assert "__temporal_workflow_stream_publish" in messages(events)
    assert set(model_call_queues(events)) == {run_queue(events) + "-model"}
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    model_calls, replies = set(), []
    for event in history.events:
        if event.activity_task_scheduled_event_attributes.activity_type.name == (
            ACTIVITY_MODEL_COMPLETE
        ):
            model_calls.add(event.event_id)
        completed = event.activity_task_completed_event_attributes
        if completed.scheduled_event_id in model_calls:
            [reply] = pydantic_data_converter.payload_converter.from_payloads(
                completed.result.payloads, [ModelCallResult]
            )
            replies.append(reply)
    assert replies and all(r.streamed_chars is not None for r in replies)


def test_steering_has_histories():
    """A message said to a run in flight: taken before the next model call, and
    cancelling the model call in flight (on_message: interrupt)."""
    kinds = {}
    for name in ("steered_queue", "steered_interrupt"):
        path = HISTORIES[0].parent / f"{name}.json"
        kinds[name] = {
            e.event_type for e in WorkflowHistory.from_json(name, path.read_text()).events
        }
    signalled = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    cancelled = EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
    assert signalled in kinds["steered_queue"] and cancelled not in kinds["steered_queue"]
    assert {signalled, cancelled} <= kinds["steered_interrupt"]


def test_a_session_past_its_windows_has_histories():
    """A session whose continuation dropped its oldest turns, messages and steps from the
    state it carried: the run that continued as new, and the continuation."""
    path = HISTORIES[0].parent / "session_left_in_mirror_first_run.json"
    history = WorkflowHistory.from_json("s", path.read_text())
    [continued] = [
        e.workflow_execution_continued_as_new_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    ]
    [carried] = pydantic_data_converter.payload_converter.from_payloads(
        continued.input.payloads, [RunInput]
    )
    assert carried.carry is not None
    left = carried.carry.left_in_mirror
    assert left.turns > 0 and left.messages > 0 and left.steps > 0
    assert (HISTORIES[0].parent / "session_left_in_mirror.json").exists()


def test_subagents_have_a_history():
    """A parent that delegated to two sub-agents, each a child run."""
    path = HISTORIES[0].parent / "subagents.json"
    kinds = [e.event_type for e in WorkflowHistory.from_json("s", path.read_text()).events]
    completed = EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED
    assert kinds.count(completed) == 2


def test_a_paused_parent_and_its_childs_approval_have_histories():
    """The parent forwarded its pause and resume to its child (signals it sent), and heard
    of the child's approval (signals it took); the child the other way round."""
    sent = EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    taken = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    for name in ("subagent_paused_and_approved", "subagent_paused_and_approved_child"):
        path = HISTORIES[0].parent / f"{name}.json"
        kinds = [e.event_type for e in WorkflowHistory.from_json(name, path.read_text()).events]
        assert kinds.count(sent) == 2 and kinds.count(taken) >= 2, (name, kinds)


def test_an_edit_laid_over_the_arguments_before_generation_6_has_a_history():
    """Runs of generation 5 lay an approver's edit over the arguments member by member
    (the generation-6 branch's old path); their history replays (test_replay)."""
    history = events_of("generation_5_approved_with_edit")
    assert started_input(history)["workflow_generation"] == 5
    assert "approve" in messages(history)
