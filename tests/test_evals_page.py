"""docs/evals.md as a reader follows it: runs of the demo's agent recorded, then every `sh`
block of the page run as written through bash, in a project folder of the reader's, acting
for one tenant. The two steps the page says in words are done as it says them: a file of run
ids, one a line, and a `support-desk-v2` profile beside the old one in `agents.yaml`."""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentledger import RunClient, RunSpec
from agentledger.core.constants import DEMO_AGENTS
from agentledger.profiles import load_agents
from tests.support import run_result
from tests.test_cli import cli_env
from tests.test_doc_examples import commands, shell

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "evals.md"
TASKS = ('call search_notes {"query": "refund policy"}', 'call search_notes {"query": "returns"}')


def sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S)


# Two recorded runs, then five commands (two of them evals of two cases each): about a
# minute on an idle two-core machine.
@pytest.mark.timeout(400)
async def test_the_evals_page_runs_as_written(
    client: Any, settings: Any, worker: Any, tmp_path: Path
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    ours = settings.model_copy(update={"tenant": tenant})
    async with worker():
        async with RunClient.lazy(ours) as runs:
            # As the page says: runs started from the demo's profile carry its name.
            [profile] = load_agents(DEMO_AGENTS).values()
            started = [
                (await runs.runs.start(spec=RunSpec(task=task, agent=profile.name))).run_id
                for task in TASKS
            ]
            ended = [await run_result(client, run) for run in started]
        assert [r.status.value for r in ended] == ["completed"] * len(TASKS), ended

        folder = tmp_path / "project"
        folder.mkdir()
        # "one id a line"; "Add the new version as a profile beside the old one".
        (folder / "runs.txt").write_text("\n".join(started) + "\n")
        [desk] = load_agents(DEMO_AGENTS).values()
        old = desk.model_dump(mode="json", exclude={"name"}, exclude_none=True)
        v2 = {**old, "instructions": f"{desk.instructions} Be brief."}
        agents = {desk.name: old, f"{desk.name}-v2": v2}
        (folder / "agents.yaml").write_text(yaml.safe_dump(agents))

        env = cli_env(settings, tmp_path / "home") | {"AGENTLEDGER_TENANT": tenant}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
        outputs = []
        for block in sh_blocks():
            for line in commands(block):
                code, out = await shell(line, env, cwd=folder, seconds=150)
                assert code == 0, f"docs/evals.md: `{line}` exited {code}:\n{out}"
                outputs.append(out)

    assert len(outputs) == 4, outputs
    by_agent = yaml.safe_load((folder / "evals" / "desk.yaml").read_text())
    assert sorted(c["name"] for c in by_agent["cases"]) == sorted(started)
    by_id = json.loads((folder / "evals" / "desk.json").read_text())
    assert [c["name"] for c in by_id["cases"]] == started
    evaluated, gated = outputs[2:]
    assert "2/2 passed" in evaluated and "gate passed" in evaluated, evaluated
    assert "gate passed" in gated and "red:" not in gated, gated
