"""The replay test is only worth having if it fails on a real non-deterministic edit.

Every committed AgentRun history replays cleanly against today's workflow, and fails against
the same workflow with one timer planted before its first activity: so a failure of
tests/test_replay.py means the code changed, not that the histories are broken.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.workflow import NondeterminismError

from agentledger.core import constants as names
from agentledger.workflows import AgentRunWorkflow
from tests.planted_change import PlantedAgentRun
from tests.recorded import recorded_history, replayer


def _workflow_type(path: Path) -> str:
    first = json.loads(path.read_text())["events"][0]
    return str(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])


RUN_HISTORIES = sorted(
    p
    for p in (Path(__file__).parent / "histories").glob("*.json")
    if _workflow_type(p) == names.WORKFLOW_NAME
)


def test_there_are_run_histories_to_replay():
    assert len(RUN_HISTORIES) >= 4, "record them with scripts/record_histories.py"


@pytest.mark.parametrize("path", RUN_HISTORIES, ids=lambda p: p.stem)
async def test_the_unchanged_workflow_replays_cleanly(path: Path):
    replaying = replayer([AgentRunWorkflow])
    await replaying.replay_workflow(recorded_history(path))


@pytest.mark.parametrize("path", RUN_HISTORIES, ids=lambda p: p.stem)
async def test_a_planted_timer_is_caught_as_nondeterminism(path: Path):
    replaying = replayer([PlantedAgentRun])
    with pytest.raises(NondeterminismError):
        await replaying.replay_workflow(recorded_history(path))


async def _histories() -> AsyncIterator[WorkflowHistory]:
    for path in RUN_HISTORIES:
        yield recorded_history(path)


async def test_every_history_fails_in_one_batch_replay():
    replaying = replayer([PlantedAgentRun])
    failed = set()
    async with replaying.workflow_replay_iterator(_histories()) as results:
        async for result in results:
            assert isinstance(result.replay_failure, NondeterminismError), result.history
            failed.add(result.history.workflow_id)
    assert failed == {recorded_history(p).workflow_id for p in RUN_HISTORIES}
