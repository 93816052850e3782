"""The version branches in workflow code: at most three, each listed with the condition for
its removal, and the histories that needed a retired one refused by name, never replayed along
a path they did not take."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from agentledger.client.deploy_check import facts_of
from agentledger.core import version_branches
from agentledger.core.version_branches import HistoryFacts
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.admission import TenantAdmissionWorkflow
from agentledger.workflows.backlog import AgentBacklogWorkflow
from tests.recorded import HISTORIES, recorded_history, replayer
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW_CODE = sorted((ROOT / "agentledger" / "workflows").glob("*.py")) + sorted(
    (ROOT / "workflows").glob("*.py")
)
ARCHIVE = sorted((ROOT / "tests" / "histories" / "archive").glob("*.json"))


def branches_in(source: str) -> list[str]:
    """Each version branch in workflow code: a `patched(...)` call, a `changes.has(...)` call,
    or a read of a generation switch (`self.changes.generation_N`)."""
    found = []
    for node in ast.walk(parse_python(source)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name == "patched" or (
                name == "has" and "changes" in ast.unparse(getattr(node.func, "value", node))
            ):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Attribute) and re.fullmatch(r"generation_\d+", node.attr):
            if isinstance(node.ctx, ast.Load):
                found.append(ast.unparse(node))
    return found


def test_at_most_three_version_branches_remain_in_workflow_code():
    found = {
        path.relative_to(ROOT).as_posix(): branches_in(path.read_text()) for path in WORKFLOW_CODE
    }
    every = [f"{path}: {branch}" for path, branches in found.items() for branch in branches]
    # A generation switch read in two components is one branch: it goes when its generation does.
    distinct = {re.sub(r"^.*\.(generation_\d+)$", r"\1", b) for bs in found.values() for b in bs}
    assert len(distinct) <= version_branches.MAX_LIVE == 3, every
    assert len(distinct) == len(version_branches.LIVE), every
    # Each live branch is where the inventory says, and in docs/versioning.md with its removal.
    docs = (ROOT / "docs" / "versioning.md").read_text()
    for branch in version_branches.LIVE:
        file = branch.where.split(" ")[0]
        assert found[file], f"{branch.id}: no branch in {file}"
        assert f"`{branch.id}`" in docs, f"{branch.id} is not in docs/versioning.md"
    assert "Condition for removal" in docs or "condition for its removal" in docs


def test_the_counter_sees_each_kind_of_branch():
    source = (
        "if workflow.patched('x'):\n    pass\n"
        "if self.changes.has(P):\n    pass\n"
        "if self.changes.generation_5 and y:\n    pass\n"
        "self.generation = 3\n"
    )
    assert len(branches_in(source)) == 3


async def test_the_archive_holds_every_history_that_needs_a_retired_branch():
    assert len(ARCHIVE) >= 20
    for path in HISTORIES:
        facts = await facts_in(path)
        assert version_branches.retired_needed(facts) == [], path.name


async def facts_in(path: Path) -> HistoryFacts:
    return await facts_of(recorded_history(path), pydantic_data_converter)


@pytest.mark.parametrize("path", ARCHIVE, ids=lambda p: p.stem)
async def test_an_archived_history_is_named_as_needing_a_retired_branch(path: Path):
    facts = await facts_in(path)
    needed = version_branches.retired_needed(facts)
    if facts.workflow_type == "AgentRun":
        retired = {
            version_branches.RETIRED_GENERATIONS,
            version_branches.RETIRED_GENERATIONS_3_AND_4,
        }
        assert retired & set(needed), path.name
    else:  # a workflow of the user's own, from before run_agent read the tenant's policy
        assert needed == [version_branches.RUN_AGENT_READS_POLICY], path.name


async def test_replaying_an_archived_history_is_refused_by_name():
    """Today's code refuses the run in its first activation, naming the retired branch: it
    never replays it along paths it did not take."""
    replaying = replayer([AgentRunWorkflow, AgentBacklogWorkflow, TenantAdmissionWorkflow])
    for name, retired in (
        ("generation_2", "generation-2-and-before"),
        ("approved_with_edit", "generation-2-and-before"),
        ("watched_and_streamed", "generation-2-and-before"),
        ("generation_3", "generations-3-and-4"),
        ("generation_4_rejected", "generations-3-and-4"),
    ):
        path = ROOT / "tests" / "histories" / "archive" / f"{name}.json"
        result = await replaying.replay_workflow(
            recorded_history(path), raise_on_replay_failure=False
        )
        assert result.replay_failure is not None, name
        assert f"needs retired branch {retired}" in str(result.replay_failure), name


def test_which_runs_need_the_old_path_of_each_live_branch():
    run, queue, backlog = (
        "AgentRun",
        "TenantAdmission",
        "AgentBacklog",
    )
    old_paths = version_branches.live_old_paths
    for generation in (3, 4):
        facts = HistoryFacts(workflow_type=run, generation=generation)
        assert old_paths(facts) == []
        assert version_branches.retired_needed(facts) == ["generations-3-and-4"]
    assert old_paths(HistoryFacts(workflow_type=run, generation=5)) == ["generation-6"]
    assert old_paths(HistoryFacts(workflow_type=run, generation=6)) == []
    assert old_paths(HistoryFacts(workflow_type=queue, decided=True)) == [
        "admission-sweeps-closed-runs"
    ]
    swept = HistoryFacts(
        workflow_type=queue, decided=True, patches=["admission-sweeps-closed-runs"]
    )
    assert old_paths(swept) == []
    assert old_paths(HistoryFacts(workflow_type=queue, decided=False)) == []
    assert old_paths(HistoryFacts(workflow_type=backlog, started_children=True)) == [
        "backlog-child-policy"
    ]
    # A workflow of the user's own that started an agent's run: with the marker of the
    # policy read it replays; without, it needs the retired branch.
    own = HistoryFacts(workflow_type="RefundReview", started_children=True)
    assert version_branches.retired_needed(own) == ["run-agent-reads-policy"]
    read = own.model_copy(update={"patches": ["run-agent-reads-policy"]})
    assert version_branches.retired_needed(read) == []
    assert old_paths(HistoryFacts(workflow_type=backlog)) == []
    assert version_branches.retired_needed(HistoryFacts(workflow_type=run)) == [
        "generation-2-and-before"
    ]
    marked = HistoryFacts(workflow_type=queue, decided=True, patches=["mirror-queue"])
    assert version_branches.retired_needed(marked) == ["mirror-queue"]


async def test_an_open_run_that_needs_a_retired_branch_is_refused_and_reported(
    client, settings, worker, tmp_path
):
    """A run started by an older engine (no generation in its input) on a worker of today's
    code: its first task fails naming the retired branch, and the run stays open for a worker
    of its own build. `deploy check` reports it by name without replaying it; `deploy patches`
    lists it (exit 1), beside a run of today's generation that needs no old path."""
    from temporalio.api.enums.v1 import EventType

    from agentledger.client import deploy_check
    from tests import client_ops as ops
    from tests.support import eventually, make_spec, wait_pending
    from tests.test_cli import run_cli

    queue = settings.task_queue
    old = await client.start_workflow(
        AgentRunWorkflow.run, make_spec(), id="run-from-an-older-engine", task_queue=queue
    )
    async with worker():
        new = await ops.start_run(client, make_spec(), task_queue=queue)
        await wait_pending(client, new.run_id)

        async def refused() -> str | None:
            for event in (await old.fetch_history()).events:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    return event.workflow_task_failed_event_attributes.failure.message
            return None

        message = await eventually(refused, what="the old run's task to fail")
    assert message.startswith("needs retired branch generation-2-and-before"), message
    assert (await old.describe()).status is not None and (await old.describe()).close_time is None

    async def listed() -> bool:
        found = await deploy_check.check(client, task_queue=queue)
        return len(found.verdicts) == 2

    await eventually(listed, what="both runs to be listed")
    report = await deploy_check.check(client, task_queue=queue)
    verdicts = {v.workflow_id: v for v in report.verdicts}
    assert verdicts[new.run_id].ok
    refused_run = verdicts["run-from-an-older-engine"]
    assert not refused_run.ok and refused_run.needs_retired == ["generation-2-and-before"]
    assert refused_run.error and "needs retired branch generation-2-and-before" in refused_run.error

    shown = await run_cli(settings, tmp_path, "deploy", "patches", "--json")
    assert shown.code == 1, shown.err
    inventory = shown.json()
    assert inventory["scanned"] == 2
    assert [b["id"] for b in inventory["live"]] == [b.id for b in version_branches.LIVE]
    assert all(b["open_runs"] == [] and b["removable"] for b in inventory["live"])
    assert [r["workflow_id"] for r in inventory["retired"]] == ["run-from-an-older-engine"]
    assert "needs retired branch" in inventory["retired"][0]["message"]
    text = await run_cli(settings, tmp_path, "deploy", "patches")
    assert "RETIRED run-from-an-older-engine" in text.out, text.out
    assert f"{len(version_branches.LIVE)} version branch(es)" in text.out, text.out
    checked = await run_cli(settings, tmp_path, "deploy", "check")
    assert checked.code == 1 and "needs retired branch" in checked.out, checked.out
    await old.terminate("test over")
