"""Replays every committed history against today's workflow code: non-determinism fails CI.

Record new histories with `python scripts/record_histories.py` after an intended change,
and keep the old ones: in-flight runs were started by the old code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows import AgentRunWorkflow
from workflows.backlog import AgentBacklogWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_committed():
    assert len(HISTORIES) >= 4, "record them with scripts/record_histories.py"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replay(path: Path):
    history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())  # noqa: ASYNC240
    replayer = Replayer(
        workflows=[AgentRunWorkflow, AgentBacklogWorkflow], data_converter=pydantic_data_converter
    )
    await replayer.replay_workflow(history)
