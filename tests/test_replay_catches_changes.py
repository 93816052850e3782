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
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from agentrun.core import constants as names
from tests.planted_change import PlantedAgentRun
from workflows import AgentRunWorkflow


def _workflow_type(path: Path) -> str:
    first = json.loads(path.read_text())["events"][0]
    return str(first["workflowExecutionStartedEventAttributes"]["workflowType"]["name"])


RUN_HISTORIES = sorted(
    p
    for p in (Path(__file__).parent / "histories").glob("*.json")
    if _workflow_type(p) == names.WORKFLOW_NAME
)


def _history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())


def test_there_are_run_histories_to_replay():
    assert len(RUN_HISTORIES) >= 4, "record them with scripts/record_histories.py"


@pytest.mark.parametrize("path", RUN_HISTORIES, ids=lambda p: p.stem)
async def test_the_unchanged_workflow_replays_cleanly(path: Path):
    replayer = Replayer(workflows=[AgentRunWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(_history(path))


@pytest.mark.parametrize("path", RUN_HISTORIES, ids=lambda p: p.stem)
async def test_a_planted_timer_is_caught_as_nondeterminism(path: Path):
    replayer = Replayer(workflows=[PlantedAgentRun], data_converter=pydantic_data_converter)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(_history(path))


async def _histories() -> AsyncIterator[WorkflowHistory]:
    for path in RUN_HISTORIES:
        yield _history(path)


async def test_every_history_fails_in_one_batch_replay():
    replayer = Replayer(workflows=[PlantedAgentRun], data_converter=pydantic_data_converter)
    failed = set()
    async with replayer.workflow_replay_iterator(_histories()) as results:
        async for result in results:
            assert isinstance(result.replay_failure, NondeterminismError), result.history
            failed.add(result.history.workflow_id)
    assert failed == {f"replay-{p.stem}" for p in RUN_HISTORIES}
