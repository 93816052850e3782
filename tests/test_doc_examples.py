"""Every command block of the README, docs/using.md and docs/http.md, run as written on a stack
of its own: `agentledger up` in a subprocess with its own AGENTLEDGER_HOME, then each block's
commands through bash, each expected to exit 0, and the runs they start to end as the page
says. A block that cannot run here is listed below with the reason.

The test only waits where a person would look first: before `approve` or `reject`, until the
run shows its pending approval; at the end, until the runs the pages started have ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentledger.dev.stack import free_port
from tests.support import eventually

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", "docs/using.md")
CONFIG_VARS = ("TEMPORAL_ADDRESS", "DATABASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")
# Blocks not run here, by how their first line begins, with the reason.
NOT_RUN = {
    "python3 -m venv .venv": "makes a virtual environment and installs the project "
    "(tests/test_demo_command.py runs the demo; .ci/run the installs)",
    "pip install -U pip": "runs the whole test suite",
    "# terminal 1: the stack, without the demo's worker": "tests/test_readme_agent.py runs "
    "the README's agent section, command for command",
    "# terminal 2: a worker with your tools and your MCP server": "tests/test_readme_agent.py",
    "# terminal 3: run the agent, approve its refund, read its receipt": "tests/"
    "test_readme_agent.py",
    "agentledger up": "servers that run until Ctrl-C; this test starts the stack the same way",
}
# How the runs the pages start end: the README's and using.md's.
ENDINGS = {
    "run-refund-ana": "completed",
    "run-acme~bo": "cancelled",
    "run-cy": "cancelled",
    "run-refund-dan": "completed",
    "run-globex~eve": "cancelled",
    "run-fay": "cancelled",
    "run-acme~refund-42": "completed",  # docs/http.md's, started over HTTP
}
TERMINAL = {"completed", "failed", "cancelled", "terminated", "timed_out"}


def bash_blocks(page: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / page).read_text(), re.S)


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comment lines dropped."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def not_run(block: str) -> str | None:
    """Why the block is not run here, or None: it is."""
    first = block.splitlines()[0]
    return next((why for start, why in NOT_RUN.items() if first.startswith(start)), None)


def runnable(page: str) -> list[str]:
    return [b for b in bash_blocks(page) if not_run(b) is None]


def test_every_block_is_run_or_listed_with_its_reason() -> None:
    firsts = [b.splitlines()[0] for page in PAGES for b in bash_blocks(page)]
    gone = [start for start in NOT_RUN if not any(f.startswith(start) for f in firsts)]
    assert not gone, f"NOT_RUN names blocks that are gone: {gone}"
    assert [len(runnable(page)) for page in PAGES] == [0, 2]


def clean_env(home: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in CONFIG_VARS and not name.startswith("AGENTLEDGER_")
    }
    bin_dir = str(Path(sys.executable).parent)  # `agentledger`, beside this interpreter
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["AGENTLEDGER_HOME"] = str(home)
    env["AGENTLEDGER_CONFIG_DIR"] = str(home / "config")  # `approvers add` keeps keys here
    # `up`'s HTTP door on a port of its own: docs/http.md's 8321 may be another program's.
    env["AGENTLEDGER_HTTP_PORT"] = str(free_port())
    return env


@pytest.fixture
async def stack_env() -> AsyncIterator[dict[str, str]]:
    """`agentledger up` with its worker, in a folder of its own (outside pytest's: see
    tests/test_demo_command.py), stopped with Ctrl-C's signal at the end."""
    with tempfile.TemporaryDirectory(prefix="agentledger-docs-") as folder:
        env = clean_env(Path(folder) / "home")
        log_path = Path(folder) / "up.log"
        with log_path.open("w") as log:
            up = await asyncio.create_subprocess_exec(
                "agentledger",
                "up",
                "--port",
                str(free_port()),
                "--ui-port",
                str(free_port()),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        try:
            async with asyncio.timeout(100):
                while "polling" not in log_path.read_text():
                    assert up.returncode is None, log_path.read_text()
                    await asyncio.sleep(0.3)
            yield env
        finally:
            if up.returncode is None:
                os.killpg(up.pid, signal.SIGINT)
            try:
                await asyncio.wait_for(up.wait(), 40)
            except TimeoutError:
                os.killpg(up.pid, signal.SIGKILL)
                await up.wait()


async def shell(
    line: str, env: dict[str, str], *, cwd: Path = ROOT, seconds: float = 60
) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        line,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), seconds)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def status(run: str, tenant: str | None, env: dict[str, str]) -> dict[str, object]:
    scope = f" --tenant {tenant}" if tenant else ""
    code, out = await shell(f"agentledger status '{run}'{scope} --json", env)
    assert code == 0, out
    return dict(json.loads(out))


async def before(line: str, env: dict[str, str]) -> None:
    """Wait where a person would look first: a decision waits for the approval it decides."""
    words = line.split()
    decision = next((w for w in words if w in ("approve", "reject")), None)
    if decision is None:
        return
    run = words[words.index(decision) + 1]
    tenant = words[words.index("--tenant") + 1] if "--tenant" in words else None

    async def pending() -> bool:
        return (await status(run, tenant, env)).get("pending_approval") is not None

    await eventually(pending, seconds=60, what=f"{run} to wait for approval")


async def http_walkthrough(env: dict[str, str]) -> str:
    """docs/http.md's first block as one shell script (its lines share `$KEY`), on `up`'s
    door: the page's port 8321 is the one this stack's door took."""
    [block, *_] = bash_blocks("docs/http.md")
    script = block.replace("localhost:8321", f"localhost:{env['AGENTLEDGER_HTTP_PORT']}")
    code, out = await shell(script, env)
    assert code == 0, f"docs/http.md exited {code}:\n{out}"
    return out


async def run_block(page: str, block: str, env: dict[str, str]) -> list[str]:
    ran = []
    for line in commands(block):
        await before(line, env)
        code, out = await shell(line, env)
        assert code == 0, f"{page}: `{line}` exited {code}:\n{out}"
        ran.append(line)
    return ran


# About forty commands, each a new process that imports the CLI and connects: minutes on a
# busy two-core machine. The blocks' runs, tenants and approvers differ, so the blocks run
# side by side, as two people would (about 3 minutes on a busy two-core machine, 7 when others
# load it ten times over).
@pytest.mark.timeout(600)
async def test_every_command_block_runs_as_written(stack_env: dict[str, str]) -> None:
    blocks = [(page, block) for page in PAGES for block in runnable(page)]
    ran, http = await asyncio.gather(
        asyncio.gather(*(run_block(page, block, stack_env) for page, block in blocks)),
        http_walkthrough(stack_env),
    )
    assert [len(lines) for lines in ran] == [20, 17]
    assert '"run_id":"run-acme~refund-42"' in http, http
    assert "event: receipt" in http, http

    async def ended() -> dict[str, str] | None:
        code, out = await shell("agentledger list --limit 100 --json", stack_env)
        assert code == 0, out
        runs = {row["run_id"]: row["status"] for row in json.loads(out)}
        done = set(ENDINGS) <= set(runs) and all(s in TERMINAL for s in runs.values())
        return runs if done else None

    runs = await eventually(ended, seconds=60, what="the pages' runs to end")
    assert {run: runs[run] for run in ENDINGS} == ENDINGS
    forks = {run: state for run, state in runs.items() if run.startswith("run-~fork.")}
    assert len(forks) == 2 and set(forks.values()) == {"completed"}, forks
