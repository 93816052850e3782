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

from agentrun.core.constants import (
    SIGNAL_BACKLOG_ENQUEUE,
    SIGNAL_BACKLOG_RESUME,
    SIGNAL_BACKLOG_RETRY,
)
from agentrun.workflows import AgentRunWorkflow
from agentrun.workflows.admission import SWEEPS_CLOSED_RUNS, TenantAdmissionWorkflow
from agentrun.workflows.backlog import CHILD_PRIORITY, AgentBacklogWorkflow
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


def test_the_admission_sweep_has_a_history():
    """A queue whose slot holder was terminated, swept free; older queues replay without."""
    taken = {path.stem: patch_ids(path) for path in HISTORIES}
    assert SWEEPS_CLOSED_RUNS not in taken["admission_queue_before_sweep"]
    assert SWEEPS_CLOSED_RUNS in taken["admission_queue_swept"]


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
