"""docs/temporal-app.md's complete app, run as written: the page shows the files of
examples/temporal_app/ as they are, and `python examples/temporal_app/run_review.py` against the
stack the environment names starts the workflow, approves its agent and reads the receipt."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from agentledger.core.config import AgentLedgerConfig

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "examples" / "temporal_app"


def test_the_page_shows_the_files_as_they_are():
    page = (ROOT / "docs" / "temporal-app.md").read_text()
    shown = dict(re.findall(r"```python\n# (examples/temporal_app/\S+)\n(.*?)```", page, re.S))
    assert set(shown) == {
        "examples/temporal_app/review_workflow.py",
        "examples/temporal_app/run_review.py",
    }
    for path, text in shown.items():
        assert text == (ROOT / path).read_text(), f"{path} differs from the page"


@pytest.mark.timeout(240)
async def test_the_app_runs_as_written(settings: AgentLedgerConfig, pool: object, tmp_path: Path):
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AGENTLEDGER_", "TEMPORAL_"))
    } | {
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "OPENAI_BASE_URL": settings.openai_base_url or "",
        "AGENTLEDGER_HOME": str(tmp_path / "home"),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(APP / "run_review.py"),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 200)
    said = out.decode()
    assert process.returncode == 0, said
    assert re.search(r"run-~child\.review-\w+~agent asks to run send_message: approving", said)
    assert re.search(r"the review ended: run-~child\.review-\w+~agent completed", said), said
    assert re.search(r"receipt: completed \d+ steps", said), said
