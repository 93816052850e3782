"""A short script that closes its `RunClient` ends cleanly: a hundred of them, each a process of
its own that connects to Temporal and Postgres, reads, closes its client and exits through the
interpreter's shutdown, all exit 0. (The same scripts without the close aborted about one time
in ten at exit, while the SDK's runtime threads met a finalizing interpreter:
temporalio/sdk-python#300.)

Importing the client is most of a short script's cost (about 1.7 s of CPU), and it has nothing
to do with how the script ends. So a parent imports once and forks the hundred: each child
builds its own Temporal runtime and connections, runs the script's text, and leaves through
`SystemExit` and the interpreter's full shutdown (atexit, thread joins, module teardown), never
`os._exit`. Two more run the script as users do, from a fresh interpreter, so nothing the
parent prepared can hide a failure.
"""

from __future__ import annotations

import _thread
import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from agentledger.client.run_client import release_native_clients
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

# Runs SCRIPT in SCRIPTS forked children, AT_ONCE at a time; prints each child's exit status.
# The parent starts no thread and no runtime before forking (asserted), so each child starts
# as a fresh script would, only with its imports done.
FORKING_PARENT = """
import gc, json, os, signal, sys, threading

import agentledger

agentledger.RunClient, agentledger.NotFound  # the client's imports, made once
assert threading.active_count() == 1, threading.enumerate()
import temporalio.runtime
assert temporalio.runtime._runtime_ref._default_runtime is None
# The collector leaves the imported objects alone in every child (CPython's advice for a forking
# parent): otherwise each child's first collection writes to every page it shares, copying the
# whole heap. What a child creates (its runtime, client, loop) is collected as in any script.
gc.freeze()

script, count, at_once, errors = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
running, statuses = {}, {}


def reap() -> None:
    pid, status = os.wait()
    statuses[running.pop(pid)] = os.waitstatus_to_exitcode(status)


for number in range(count):
    while len(running) >= at_once:
        reap()
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(f"{errors}/{number}", os.O_WRONLY | os.O_CREAT, 0o644), 2)
        signal.alarm(60)  # a child that hangs dies of SIGALRM and is reported
        exec(compile(script, "script.py", "exec"), {"__name__": "__main__"})
        sys.exit(0)  # unwinds to the interpreter's own shutdown, as the script's end would
    running[pid] = number
while running:
    reap()
print(json.dumps(statuses))
"""
FORKED = 100
FRESH = 2
AT_ONCE = 10


@pytest.mark.timeout(300)
async def test_a_hundred_short_scripts_that_close_their_client_exit_0(
    settings: AgentLedgerConfig, pool: object, tmp_path: Path
) -> None:  # `pool`: the mirror migrated
    env = {
        name: value for name, value in os.environ.items() if not name.startswith("AGENTLEDGER_")
    } | {
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "AGENTLEDGER_HOME": str(tmp_path / "home"),
    }
    errors = tmp_path / "stderr"
    errors.mkdir()

    async def run(*args: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), 240)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    forked, *fresh = await asyncio.gather(
        run(FORKING_PARENT, SCRIPT, str(FORKED), str(AT_ONCE), str(errors)),
        *(run(SCRIPT) for _ in range(FRESH)),
    )
    code, out, err = forked
    assert code == 0, err[-2000:]
    statuses = {int(number): status for number, status in json.loads(out).items()}
    assert sorted(statuses) == list(range(FORKED))
    failed = "\n---\n".join(
        f"script {number}: {(errors / str(number)).read_text()[-800:]}"
        for number, status in statuses.items()
        if status != 0
    )
    assert Counter(statuses.values()) == {0: FORKED}, failed[:4000]
    assert [code for code, _, _ in fresh] == [0] * FRESH, [err[-800:] for _, _, err in fresh]


async def test_a_client_closes_only_once_no_native_thread_is_left_inside_python() -> None:
    """What a close waits for: a thread the interpreter did not start (the bridge's, here one
    started by `_thread`, which `threading` does not list either) still running Python as
    the script ends. The pause alone would not wait it out."""
    left = threading.Event()

    def bridge_thread() -> None:
        time.sleep(0.5)  # the GIL let go, as a bridge thread's wake of the event loop does
        left.set()

    _thread.start_new_thread(bridge_thread, ())
    await asyncio.sleep(0.01)
    await release_native_clients()
    assert left.is_set()
