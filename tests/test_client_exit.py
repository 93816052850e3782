"""A short script that closes its `RunClient` ends cleanly: a hundred of them, each a Python
process of its own that connects to Temporal and Postgres, reads, closes its client and exits
through the interpreter's shutdown, all exit 0. (The same scripts without the close aborted
about one time in ten at exit: temporalio/sdk-python#300.)

Eight run at a time; each spends most of its second importing, so the hundred cost about a
minute of CPU (on CI's two cores, about half that in wall time).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter

import pytest

from agentledger.core.config import AgentLedgerConfig

SCRIPT = """
import asyncio

import agentledger


async def main() -> None:
    async with agentledger.RunClient.lazy(wait=30) as client:
        try:
            await client.runs.status("run-no-such-run")
        except agentledger.NotFound:
            pass
        await client.runs.recent(limit=1)


asyncio.run(main())
"""
SCRIPTS = 100
AT_ONCE = 8


@pytest.mark.timeout(600)
async def test_a_hundred_short_scripts_that_close_their_client_exit_0(
    settings: AgentLedgerConfig, pool: object, tmp_path
):  # `pool`: the mirror migrated
    env = {
        name: value for name, value in os.environ.items() if not name.startswith("AGENTLEDGER_")
    } | {
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "AGENTLEDGER_HOME": str(tmp_path / "home"),
    }
    slots = asyncio.Semaphore(AT_ONCE)

    async def script() -> tuple[int, str]:
        async with slots:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                SCRIPT,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await asyncio.wait_for(process.communicate(), 120)
            assert process.returncode is not None
            return process.returncode, err.decode()

    ended = await asyncio.gather(*(script() for _ in range(SCRIPTS)))
    codes = Counter(code for code, _ in ended)
    failed = "\n---\n".join(err[-800:] for code, err in ended if code != 0)[:4000]
    assert codes == {0: SCRIPTS}, f"exit statuses {dict(codes)}:\n{failed}"
