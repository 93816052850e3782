"""The project's own image, proven: the Dockerfile built on a base made from Debian's packages
(no registry), its worker run as a container on the host's network against the test stack,
and the demo's run completed through it, every step done by the container's worker."""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import parse_qs, urlparse

import pytest

from agentledger import RunClient
from agentledger.cli.main import run_demo
from tests import sandbox_support
from tests.sandbox_support import Engine, build_project_image
from tests.support import eventually, rows

pytestmark = pytest.mark.timeout(900)
docker_engine = sandbox_support.docker_engine  # the session's engine


async def test_the_projects_image_runs_the_demo(settings, pool, docker_engine: Engine) -> None:
    image = await asyncio.to_thread(build_project_image, docker_engine)
    volumes = {}
    # An embedded Postgres listens on a Unix socket: its folder is mounted where it is.
    socket_dir = parse_qs(urlparse(settings.database_url).query).get("host", [""])[0]
    if socket_dir.startswith("/"):
        volumes[socket_dir] = {"bind": socket_dir, "mode": "rw"}
    identity = f"image-worker-{settings.task_queue}"
    container = docker_engine.client.containers.run(
        image,
        ["python", "worker.py", "--demo", "--identity", identity],
        detach=True,
        network_mode="host",  # the stack is on loopback; never a bridge here
        user="0",  # the embedded Postgres's folder is its owner's alone
        volumes=volumes,
        environment={
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "DATABASE_URL": settings.database_url,
            "OPENAI_BASE_URL": settings.openai_base_url,
            "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
            "AGENTLEDGER_HOME": "/tmp/agentledger",
        },
        labels={"agentledger.test": "project-image"},
    )
    try:

        async def polling() -> bool:
            container.reload()
            if container.status != "running":
                raise AssertionError(container.logs().decode()[-3000:])
            return b"polling" in container.logs()

        await eventually(polling, seconds=120, what="the container's worker to poll")
        async with RunClient.lazy(settings) as runs:
            demo = await run_demo(runs, argparse.Namespace(json=True))
        assert demo == 0, container.logs().decode()[-3000:]
        runs = await rows(pool, "SELECT DISTINCT run_id FROM steps WHERE worker = %s", identity)
        assert len(runs) == 1, "the demo's run, on the container's worker"
        workers = await rows(
            pool,
            "SELECT DISTINCT worker FROM steps WHERE run_id = %s AND worker IS NOT NULL",
            runs[0]["run_id"],
        )
        assert [w["worker"] for w in workers] == [identity]
    finally:
        container.remove(force=True)
