"""Replays every committed history against today's workflow code: non-determinism fails CI.

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

from agentrun.core.constants import (
    ACTIVITY_MODEL_COMPLETE,
    SIGNAL_BACKLOG_ENQUEUE,
    SIGNAL_BACKLOG_RESUME,
    SIGNAL_BACKLOG_RETRY,
)
from agentrun.core.models import ModelCallResult
from agentrun.workflows import AgentRunWorkflow
from agentrun.workflows.admission import SWEEPS_CLOSED_RUNS, TenantAdmissionWorkflow
from agentrun.workflows.agent_run import MODEL_CALL_QUEUE
from agentrun.workflows.backlog import CHILD_PRIORITY, AgentBacklogWorkflow
from agentrun.workflows.recording import MIRROR_QUEUE, MIRROR_SYNC_AFTER_COMMIT, MIRROR_SYNC_LOCAL
from tests.recorded import HISTORIES, recorded_history, replayer


def test_histories_are_committed():
    assert len(HISTORIES) >= 4, "record them with scripts/record_histories.py"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replay(path: Path):
    replaying = replayer([AgentRunWorkflow, AgentBacklogWorkflow, TenantAdmissionWorkflow])
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


def test_every_mirror_write_path_has_a_history():
    """Each way a run has written its mirror stays covered: activities before the local
    activity patch, local activities, and activities again after the commit patch."""
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert MIRROR_SYNC_LOCAL not in taken["approved_with_edit"]
    assert taken["approved_local_mirror"] >= {MIRROR_SYNC_LOCAL}
    assert MIRROR_SYNC_AFTER_COMMIT not in taken["approved_local_mirror"]
    assert MIRROR_SYNC_AFTER_COMMIT in taken["approved_mirror_after_commit"]


def test_model_call_queue_and_admission_have_histories():
    """Model calls on their own queue, and a run that waited in its tenant's queue."""
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert MODEL_CALL_QUEUE not in taken["budget_extended"]
    assert MODEL_CALL_QUEUE in taken["admitted_from_queue"]
    assert "admitted_from_queue_queue" in taken


def test_the_admission_sweep_has_a_history():
    """A queue whose slot holder was terminated, swept free; older queues replay without."""
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert SWEEPS_CLOSED_RUNS not in taken["admitted_from_queue_queue"]
    assert SWEEPS_CLOSED_RUNS in taken["terminated_holding_slot_queue"]


def test_backlog_child_priority_has_a_history():
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert CHILD_PRIORITY not in taken["backlog_stop_resume_poison_retry"]
    assert CHILD_PRIORITY in taken["backlog_child_priority"]


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


def test_mirror_queue_has_a_history():
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert MIRROR_QUEUE not in taken["admitted_from_queue"]
    assert MIRROR_QUEUE in taken["mirror_queue"]


def test_the_audit_fixes_have_histories():
    """The paths issue 13 added (the patch ids in agentrun/workflows/agent_run.py) are recorded."""
    from agentrun.workflows.agent_run import (
        CONTINUE_AFTER_BOUNDARY,
        EFFECT_KEYS,
        JUDGE_COUNTED,
        RECEIPT_SHIELDED,
        TOOL_CANCEL_WAITS,
        UNKNOWN_STAYS_UNKNOWN,
    )

    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert taken["approved_effect_keys"] >= {EFFECT_KEYS, TOOL_CANCEL_WAITS, JUDGE_COUNTED}
    assert taken["cancelled_receipt_shielded"] >= {RECEIPT_SHIELDED}
    assert taken["continued_after_step_boundary"] >= {CONTINUE_AFTER_BOUNDARY}
    assert taken["unknown_outcome_expired"] >= {UNKNOWN_STAYS_UNKNOWN}
    assert UNKNOWN_STAYS_UNKNOWN not in taken["approved_effect_keys"]
    assert EFFECT_KEYS not in taken["approved_mirror_after_commit"]


def test_streams_and_forks_have_histories():
    """A watched run (stream signals from the model activity, a watcher's poll updates) and
    a fork (`fork.seed`, an edited step) are recorded, so their paths replay."""
    watched = json.loads((HISTORIES[0].parent / "watched_and_streamed.json").read_text())
    kinds = [e["eventType"] for e in watched["events"]]
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED" in kinds
    signals = [
        e["workflowExecutionSignaledEventAttributes"]["signalName"]
        for e in watched["events"]
        if e["eventType"] == "EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED"
    ]
    assert "__temporal_workflow_stream_publish" in signals
    forked = json.loads((HISTORIES[0].parent / "forked_with_edit.json").read_text())
    activities = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in forked["events"]
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    ]
    assert "fork.seed" in activities and "tool.invoke" not in activities


def test_quiet_mirror_writes_have_a_history():
    from agentrun.workflows.agent_run import QUIET_MIRROR

    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert QUIET_MIRROR in taken["quiet_mirror"]
    assert QUIET_MIRROR not in taken["watched_and_streamed"]
    quiet = json.loads((HISTORIES[0].parent / "quiet_mirror.json").read_text())
    loud = json.loads((HISTORIES[0].parent / "watched_and_streamed.json").read_text())

    def mirror_writes(history: dict) -> int:
        return sum(
            1
            for e in history["events"]
            if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
            and e["activityTaskScheduledEventAttributes"]["activityType"]["name"] == "mirror.sync"
        )

    assert mirror_writes(quiet) == mirror_writes(loud) - 2  # the same run, two writes fewer


def test_a_step_carrying_the_mirror_batch_has_a_history():
    """With the batch riding in each step's activity, a run schedules one activity per step:
    the same approved run as quiet_mirror, with `mirror.sync` only at the approval and the end."""
    from agentrun.workflows.recording import MIRROR_RIDES_STEP

    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert MIRROR_RIDES_STEP in taken["step_carries_mirror"]
    assert MIRROR_RIDES_STEP not in taken["quiet_mirror"]

    def scheduled(name: str) -> list[str]:
        history = json.loads((HISTORIES[0].parent / f"{name}.json").read_text())
        return [
            e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
            for e in history["events"]
            if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
        ]

    before, after = scheduled("quiet_mirror"), scheduled("step_carries_mirror")
    steps = [a for a in after if a in ("model.complete", "tool.invoke", "verify.check")]
    assert steps == [a for a in before if a in ("model.complete", "tool.invoke", "verify.check")]
    assert after.count("mirror.sync") == 2  # the approval wait and the run's final write
    assert len(after) == len(steps) + 3  # and the receipt
    assert len(before) - len(after) == before.count("mirror.sync") - 2


def test_generation_2_has_histories_with_one_marker_and_one_last_write():
    """A run of generation 2 asks one patch for every change before it, upserts its status
    only when the shown status changes, and writes its last rows with its receipt: the same
    approved run as step_carries_mirror, in fewer events."""
    from agentrun.workflows.changes import GENERATION_2

    def events(name: str) -> list[dict]:
        return json.loads((HISTORIES[0].parent / f"{name}.json").read_text())["events"]

    def of_type(history: list[dict], kind: str) -> list[dict]:
        return [e for e in history if e["eventType"] == f"EVENT_TYPE_{kind}"]

    def scheduled(history: list[dict]) -> list[str]:
        return [
            e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
            for e in of_type(history, "ACTIVITY_TASK_SCHEDULED")
        ]

    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    for name in ("generation_2", "generation_2_cancelled", "generation_2_watched"):
        assert taken[name] == {GENERATION_2}, name
        assert scheduled(events(name))[-1] == "mirror.finish", name
        assert "receipts.record" not in scheduled(events(name)), name
    assert all(GENERATION_2 not in ids for name, ids in taken.items() if "generation_2" not in name)
    before, after = events("step_carries_mirror"), events("generation_2")

    def markers(history: list[dict], name: str) -> int:
        return sum(
            1
            for e in of_type(history, "MARKER_RECORDED")
            if e["markerRecordedEventAttributes"]["markerName"] == name
        )

    assert markers(before, "core_patch") == 10
    assert markers(after, "core_patch") == 1
    # Its checks (no judge) ran as a local activity, inside a workflow task: one marker.
    assert markers(after, "core_local_activity") == 1 and "verify.check" in scheduled(before)
    statuses = [
        e["upsertWorkflowSearchAttributesEventAttributes"]["searchAttributes"]["indexedFields"]
        for e in of_type(after, "UPSERT_WORKFLOW_SEARCH_ATTRIBUTES")
    ]
    shown = [
        json.loads(base64.b64decode(f["AgentrunStatus"]["data"]))
        for f in statuses
        if "AgentrunStatus" in f
    ]
    assert shown == ["waiting_for_approval", "running", "completed"]
    dropped = ("receipts.record", "verify.check")
    assert [a for a in scheduled(before) if a not in dropped][:-1] == scheduled(after)[:-1]
    assert len(after) < len(before) - 25


def test_generation_3_has_histories_without_markers():
    """A run of generation 3 names it in its input: no patch marker, no change-version
    upsert; its checks' verdict came back with the model's reply: no local activity."""
    for name in ("generation_3", "generation_3_cancelled"):
        history = json.loads((HISTORIES[0].parent / f"{name}.json").read_text())["events"]
        started = history[0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
        assert json.loads(base64.b64decode(started["data"]))["workflow_generation"] == 3
        kinds = [e["eventType"] for e in history]
        assert "EVENT_TYPE_MARKER_RECORDED" not in kinds, name
        upserted = [
            field
            for e in history
            if e["eventType"] == "EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"
            for field in e["upsertWorkflowSearchAttributesEventAttributes"]["searchAttributes"][
                "indexedFields"
            ]
        ]
        assert set(upserted) == {"AgentrunStatus"}, name


def test_a_reply_finished_by_the_workflow_has_a_history():
    """A reply streamed in part by its activity and finished by the workflow's own publish
    (`streamed_chars`), with a watcher's polls answered from it, replays."""
    path = HISTORIES[0].parent / "generation_2_watched.json"
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
    assert all(r.streamed_chars is not None for r in replies)
    last = replies[-1]
    assert last.content and last.streamed_chars is not None
    assert 0 < last.streamed_chars < len(last.content)
    polls = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED
    assert polls in {e.event_type for e in history.events}


def test_steering_has_histories():
    """A message said to a run in flight (issue 29): taken before the next model call, and
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


def test_subagents_have_a_history():
    """A parent that delegated to two sub-agents, each a child run (issue 29)."""
    path = HISTORIES[0].parent / "subagents.json"
    kinds = [e.event_type for e in WorkflowHistory.from_json("s", path.read_text()).events]
    completed = EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED
    assert kinds.count(completed) == 2
