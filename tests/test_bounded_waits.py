"""Every command returns within its `--wait` (plus a second): a Temporal or a Postgres that
accepts and never answers, a malformed DATABASE_URL, a capped tenant's start with no worker."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentledger.core.admission_models import TenantLimits
from agentledger.core.errors import OperationError, ServiceUnreachable
from agentledger.core.set_up_bound import ONE_TRY_SECONDS
from agentledger.store.db import open_pool
from tests import client_ops as ops
from tests.support import make_spec


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP listener that accepts every connection and never says a word; its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(50)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


@pytest.fixture
def silent_postgres(silent_port: int) -> str:
    return f"postgresql://app:s3cr3t@127.0.0.1:{silent_port}/runs"


async def test_a_postgres_that_never_answers_is_named_within_the_wait(silent_postgres):
    began = time.monotonic()
    with pytest.raises(
        ServiceUnreachable, match=r"cannot reach Postgres .* within 1s \(no answer\)"
    ):
        await open_pool(silent_postgres, connect_seconds=1, migrate=False)
    assert time.monotonic() - began < 2.0


async def test_a_read_held_behind_a_lock_ends_within_the_wait(settings, pool, tmp_path):
    """Connected is not answered: a read waiting on a lock is cancelled by Postgres at the
    command's `--wait` (its statement timeout), and the command says so."""
    environ = {"DATABASE_URL": settings.database_url or ""}
    async with pool.connection() as holder, holder.transaction():
        await holder.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
        began = time.monotonic()
        done = await asyncio.to_thread(run_cli, environ, "list", "--wait", "2", cwd=tmp_path)
        took = time.monotonic() - began
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "statement timeout" in done.stderr and "Traceback" not in done.stderr
    assert took < 2 + 1 + 5, f"{took:.1f} s (the bound, a second, the interpreter's start)"


def run_cli(environ: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "TEMPORAL_"))}
    return subprocess.run(
        [sys.executable, "-m", "agentledger", *args],
        env={**env, "AGENTLEDGER_HOME": str(cwd / "home"), **environ},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_list_against_a_silent_postgres_says_so_in_one_line(silent_postgres, tmp_path):
    done = run_cli({"DATABASE_URL": silent_postgres}, "list", "--wait", "1", cwd=tmp_path)
    assert done.returncode == 4  # a service out of reach (docs/using.md "Exit codes")
    assert done.stderr.strip().splitlines() == [
        f"error: cannot reach Postgres at {silent_postgres.replace(':s3cr3t@', ':***@')} "
        "within 1s (no answer): check DATABASE_URL, or start the local stack with `agentledger up`"
    ]


@pytest.mark.parametrize(
    ("service", "command", "what_to_do"),
    [
        ("TEMPORAL_ADDRESS", "status", "check TEMPORAL_ADDRESS, start the local stack"),
        ("DATABASE_URL", "list", "check DATABASE_URL, or start the local stack"),
    ],
)
def test_the_console_script_answers_within_its_wait_when_a_service_never_answers(
    silent_port, tmp_path, service, command, what_to_do
):
    """`--wait 3` bounds the whole command, connection set-up included: it answers within
    3 s and a little, exit 4, saying what to do. Importing the client counts against the
    bound; on a machine so busy that the import alone takes most of it, the connection
    still has its one fair try (ONE_TRY_SECONDS)."""
    address = f"127.0.0.1:{silent_port}"
    value = address if service == "TEMPORAL_ADDRESS" else f"postgresql://app@{address}/runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "TEMPORAL_"))}

    def importing() -> float:
        began = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", "import agentledger.client.run_client"], check=True, env=env
        )
        return time.monotonic() - began

    before = importing()
    target = ["run-x"] if command == "status" else []
    began = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "agentledger"), command, *target, "--wait", "3"],
        env={**env, "AGENTLEDGER_HOME": str(tmp_path / "home"), service: value},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - began
    assert done.returncode == 4, (done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and address in line and "within 3s" in line, line
    assert what_to_do in line, line
    # The import timed just before and just after, the longer: a loaded machine's pace
    # changes within seconds, and the command's own import falls between the two.
    starting = max(before, importing())
    bound = max(3, starting + ONE_TRY_SECONDS)
    # The slack: the process's own start and exit, which a loaded machine stretches.
    assert took < bound + 1.5, f"{took:.2f} s for --wait 3 (importing took {starting:.2f} s)"


def test_a_malformed_database_url_is_named_malformed_once(tmp_path):
    done = run_cli({"DATABASE_URL": "notaurl"}, "list", "--wait", "1", cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: invalid setting: DATABASE_URL: malformed")
    assert line.count("malformed") == 1 and line.count("notaurl") == 1


async def test_a_capped_start_with_no_worker_returns_within_its_wait(client, settings):
    tenant = f"capped-{uuid.uuid4().hex[:6]}"
    spec = make_spec(tenant=tenant)
    began = time.monotonic()
    with pytest.raises(OperationError, match="not started: no worker answered within 2s"):
        await asyncio.wait_for(
            ops.start_run(
                client,
                spec,
                task_queue=settings.task_queue,
                limits=TenantLimits(tenant=tenant, max_in_flight=1),
                wait=2,
            ),
            30,
        )
    assert time.monotonic() - began < 3.0
