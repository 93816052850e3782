"""A worker process spaces out its garbage collections, and leaves them alone on request."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.worker import garbage_collector
from agentledger.worker.worker_api import run_worker
from tests.support import eventually


@pytest.fixture
def collector() -> Iterator[None]:
    """Put the test process's collector back as it was."""
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_the_threshold_is_a_setting_of_zero_or_more():
    assert AgentLedgerConfig.load({}).gc_threshold == 20_000
    assert AgentLedgerConfig.load({"AGENTLEDGER_GC_THRESHOLD": "0"}).gc_threshold == 0
    with pytest.raises(SetupError, match="AGENTLEDGER_GC_THRESHOLD"):
        AgentLedgerConfig.load({"AGENTLEDGER_GC_THRESHOLD": "-5"})


def test_settling_freezes_what_is_loaded_and_zero_keeps_python_s_own(collector):
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    garbage_collector.settle(0)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
    garbage_collector.settle(5_000)
    assert gc.get_threshold() == (5_000, 20, 20)
    assert gc.get_freeze_count() > 10_000  # the SDK, pydantic, the workflow code...


async def test_run_worker_settles_the_collector_once_it_serves(collector, settings):
    gc.set_threshold(700, 10, 10)
    stop = asyncio.Event()
    served = asyncio.create_task(
        run_worker(
            demo=True,
            settings=settings.model_copy(update={"gc_threshold": 12_345}),
            stop=stop,
        )
    )

    async def settled() -> bool:
        if served.done():
            served.result()  # a worker that stopped early says why
        return gc.get_threshold()[0] == 12_345

    try:
        await eventually(settled, seconds=60, what="the worker to settle its collector")
        assert gc.get_threshold() == (12_345, 20, 20)
    finally:
        stop.set()
        await asyncio.wait_for(served, 60)
