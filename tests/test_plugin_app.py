"""A user's own Temporal project adopts agentledger with `AgentLedgerPlugin`: its own
workflow and activity, its own payload codec and the SDK's OpenTelemetry plugin stay as they
were; adding the plugin changes at most five lines (tests/plugin_app). The project runs
from a folder outside the package: its workflow runs an agent that asks for approval, the
approval goes through a RunClient on the project's own Client, the run completes with its
receipt in Postgres, both histories replay with the plugin, and every payload in them is
sealed by the project's codec."""

from __future__ import annotations

import asyncio
import base64
import difflib
import importlib
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.opentelemetry import create_tracer_provider
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from agentledger import AgentLedgerPlugin, RunClient
from agentledger.temporal.codec_server import CodecServer
from agentledger.temporal.user_codec import load_codec
from agentledger.workflows.child_runs import child_run_id
from tests.support import eventually, rows, wait_pending
from tests.test_own_workflow import started

PROJECT = Path(__file__).parent / "plugin_app"
MARK = "# agentledger"


def test_adding_the_plugin_changes_at_most_five_lines():
    before = (PROJECT / "before" / "shopapp" / "app.py").read_text().splitlines()
    after = (PROJECT / "shopapp" / "app.py").read_text().splitlines()
    changed = [line[2:] for line in difflib.ndiff(before, after) if line.startswith(("+ ", "- "))]
    added = [line for line in changed if line in after]
    assert 0 < len(added) <= 5, added
    assert all(line.endswith(MARK) for line in added), "each added line is marked"
    assert [line for line in after if line.endswith(MARK)] == added
    # The rest of the project is the same before and after: only app.py has a "before".
    assert [p.name for p in (PROJECT / "before" / "shopapp").iterdir()] == ["app.py"]


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every Payload in a history's events but search attributes (the server indexes those,
    so no codec ever sees them: `TemporalChangeVersion` names a patch, nothing of a run) and
    headers (the OpenTelemetry plugin's trace ids; Temporal leaves headers to the codec only
    with `header_codec_behavior=CODEC`)."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None or field.name in ("search_attributes", "header"):
            continue
        if isinstance(value, Message):
            values = [value]
        elif field.message_type.GetOptions().map_entry:
            values = [v for v in value.values() if isinstance(v, Message)]
        else:
            values = list(value)
        for each in values:
            yield from payloads_in(each)


def sealable(event: HistoryEvent) -> Iterator[Payload]:
    """The Payloads in `event` a codec sees: not those the SDK's core writes of its own, a
    patch marker's id (`workflow.patched`) and a local activity marker's record of the call
    (its id, type, attempt and time; the call's result and failure beside it are sealed)."""
    marker = event.marker_recorded_event_attributes
    if marker.marker_name == "core_patch":
        return
    if marker.marker_name == "core_local_activity":
        for key, payloads in marker.details.items():
            if key != "data":
                yield from payloads.payloads
        if marker.HasField("failure"):
            yield from payloads_in(marker.failure)
        return
    yield from payloads_in(event)


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str, model_server: Any):
    """The project copied to a folder of its own and imported from there, its variables set."""
    shutil.copytree(PROJECT / "shopapp", tmp_path / "shopapp")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.base_url)
    monkeypatch.setenv("SHOP_TASK_QUEUE", f"shop-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("SHOP_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    for name in [m for m in sys.modules if m.partition(".")[0] == "shopapp"]:
        monkeypatch.delitem(sys.modules, name)
    app = importlib.import_module("shopapp.app")
    assert Path(str(app.__file__)).is_relative_to(tmp_path), "the project, not the checkout's copy"
    return app


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The shop's tracer provider (Temporal's replay-safe one) as the process's, for this
    test alone: the other telemetry tests of this process find theirs again after it."""
    exporter = InMemorySpanExporter()
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = trace.get_tracer_provider()
    trace._TRACER_PROVIDER_SET_ONCE._done = False  # the API sets a provider once per process
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER_SET_ONCE._done = False
        if isinstance(previous, trace.ProxyTracerProvider):
            trace._TRACER_PROVIDER = None  # none was set: the next test sets its own
        else:
            trace.set_tracer_provider(previous)


async def test_the_shops_workflow_runs_an_approved_agent(
    shop: Any, env: WorkflowEnvironment, pool: Any, spans: InMemorySpanExporter
):

    from shopapp.activities import Order
    from shopapp.workflows import OrderReview

    client: Client = await shop.connect(env.client.service_client.config.target_host)
    order = Order(order_id=f"o-{uuid.uuid4().hex[:8]}", customer="ana@example.com", amount_usd=42)
    parent_id = f"review-{order.order_id}"
    agent_run = child_run_id(parent_id, order.order_id)
    async with shop.worker(client), RunClient.on(client, shop.AGENTLEDGER) as run_client:
        handle = await client.start_workflow(
            OrderReview.run, order, id=parent_id, task_queue=shop.TASK_QUEUE
        )
        await eventually(lambda: started(client, agent_run), what="the agent's run to start")
        pending = await wait_pending(client, agent_run, seconds=60)
        assert pending.tool == "send_message"
        decision = await run_client.runs.approve(agent_run, by="maria", role="approver")
        assert decision.decision == "approved", decision
        review = await handle.result()
        parent = await handle.fetch_history()
        child = await client.get_workflow_handle(agent_run).fetch_history()
        receipt = await run_client.runs.receipt(agent_run)

    assert review.agent_run_id == agent_run and review.agent_status == "completed"
    assert review.checked.startswith(f"order {order.order_id}")
    assert receipt.outcome == "completed"
    mirrored = await rows(pool, "SELECT status FROM runs WHERE run_id = %s", agent_run)
    assert mirrored == [{"status": "completed"}]

    # Both histories replay with the plugin and the project's own converter.
    replayer = Replayer(
        workflows=[OrderReview],
        data_converter=DataConverter(payload_codec=shop.ShopCodec.from_environment()),
        plugins=[AgentLedgerPlugin(shop.AGENTLEDGER)],
    )
    for history in (parent, child):
        await replayer.replay_workflow(history)

    # What the server stores is sealed by the project's codec, agentledger's payloads included.
    for workflow_id in (parent_id, agent_run):
        raw: WorkflowHistory = await env.client.get_workflow_handle(workflow_id).fetch_history()
        stored = [p for event in raw.events for p in sealable(event)]
        assert stored, f"{workflow_id} stores payloads"
        encodings = {p.metadata.get("encoding") for p in stored}
        assert encodings == {b"binary/shop-encrypted"}, (workflow_id, encodings)

    # The SDK's OpenTelemetry plugin traced the shop's workflow and agentledger's alike, the
    # model calls on their own queue's worker included.
    await eventually(lambda: _has(spans, "RunActivity:check_order"), what="the shop's span")
    names = {span.name for span in spans.get_finished_spans()}
    assert {"RunWorkflow:OrderReview", "RunWorkflow:AgentRun", "RunActivity:model.complete"} <= (
        names
    )


async def _has(spans: InMemorySpanExporter, name: str) -> bool:
    return any(span.name == name for span in spans.get_finished_spans())


async def test_the_plugin_keeps_the_projects_failure_converter():
    """A project with a codec of its own and the SDK's default failure converter keeps it:
    its workflows' failures reach the server with their messages, as the project chose (the
    docs say the plugin keeps it), not as "Encoded failure"."""
    from temporalio.api.failure.v1 import Failure
    from temporalio.converter import DefaultFailureConverter, PayloadCodec
    from temporalio.exceptions import ApplicationError

    from agentledger import AgentLedgerConfig
    from agentledger.worker.plugin import agentledger_converter

    class ProjectCodec(PayloadCodec):
        async def encode(self, payloads: Any) -> list[Payload]:
            return [
                Payload(metadata={"encoding": b"binary/project"}, data=p.SerializeToString())
                for p in payloads
            ]

        async def decode(self, payloads: Any) -> list[Payload]:
            return [Payload.FromString(p.data) for p in payloads]

    codec = ProjectCodec()
    converted = agentledger_converter(
        DataConverter(payload_codec=codec), AgentLedgerConfig("postgresql://unused")
    )
    assert converted.failure_converter_class is DefaultFailureConverter
    assert converted.payload_codec is codec
    sent = Failure()
    await converted.encode_failure(ApplicationError("order 7 is not refundable"), sent)
    assert sent.message == "order 7 is not refundable"
    # Without a codec of the project's, agentledger's own seals failures' messages too.
    keyed = AgentLedgerConfig("postgresql://unused", encryption_keys={"k": b"\x01" * 32})
    sealed = agentledger_converter(None, keyed)
    sent = Failure()
    await sealed.encode_failure(ApplicationError("order 7 is not refundable"), sent)
    assert sent.message == "Encoded failure"


# The commands that read a run's payloads, as a person at the shop runs them on its agent's run
# (`receipt` reads the mirror alone, but belongs to reading a run that ended).
READS = [["status"], ["watch", "--wait", "20"], ["mirror", "check"], ["receipt"]]
CODEC_FIX = "set AGENTLEDGER_CODEC=PKG.MODULE:ATTR"


async def shop_command(env_vars: dict[str, str], *args: str, cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "agentledger"),
        *args,
        cwd=cwd,
        env=env_vars,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.timeout(240)
async def test_the_command_line_reads_runs_sealed_by_the_apps_own_codec(
    shop: Any,
    env: WorkflowEnvironment,
    tmp_path: Path,
    database_url: str,
    spans: InMemorySpanExporter,  # the shop's tracer provider, which its client needs
):
    """A run sealed by the shop's codec, through every command that reads its payloads:
    without the codec each says so in one line with the fix (exit 2, no traceback); with
    AGENTLEDGER_CODEC (the shop's codec by reference) approve and every read work; and through
    the shop's codec server (AGENTLEDGER_CODEC_ENDPOINT) the reads work too."""
    from shopapp.activities import Order
    from shopapp.workflows import OrderReview

    address = env.client.service_client.config.target_host
    client: Client = await shop.connect(address)
    order = Order(order_id=f"o-{uuid.uuid4().hex[:8]}", customer="bo@example.com", amount_usd=7)
    parent_id = f"review-{order.order_id}"
    agent_run = child_run_id(parent_id, order.order_id)
    plain = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AGENTLEDGER_", "TEMPORAL_"))
    } | {
        "TEMPORAL_ADDRESS": address,
        "DATABASE_URL": database_url,
        "AGENTLEDGER_HOME": str(tmp_path / "home"),
    }
    with_codec = plain | {
        "AGENTLEDGER_CODEC": "shopapp.codec:ShopCodec.from_environment",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    reads = [
        [read[0], read[1], agent_run] if read[0] == "mirror" else [read[0], agent_run, *read[1:]]
        for read in READS
    ]
    async with shop.worker(client):
        handle = await client.start_workflow(
            OrderReview.run, order, id=parent_id, task_queue=shop.TASK_QUEUE
        )
        await eventually(lambda: started(client, agent_run), what="the agent's run to start")
        await wait_pending(client, agent_run, seconds=60)

        # Without the codec: one line naming the fix, for each command.
        approve = ["approve", agent_run, "--by", "maria", "--role", "approver"]
        refused = await asyncio.gather(
            *(shop_command(plain, *c, cwd=tmp_path) for c in [approve, *reads[:-1]])
        )
        for command, (code, out, err) in zip([approve, *reads[:-1]], refused, strict=True):
            said = f"{command}: exit {code}\n{out}{err}"
            assert code == 2, said
            [line] = err.strip().splitlines()
            assert "sealed by a codec (binary/shop-encrypted)" in line and CODEC_FIX in line, said

        code, out, err = await shop_command(with_codec, "status", agent_run, cwd=tmp_path)
        assert code == 0 and "waiting_for_approval" in out, out + err
        code, out, err = await shop_command(with_codec, *approve, cwd=tmp_path)
        assert code == 0 and out.startswith("approved"), out + err
        assert (await handle.result()).agent_status == "completed"

    answered = await asyncio.gather(*(shop_command(with_codec, *c, cwd=tmp_path) for c in reads))
    for command, (code, out, err) in zip(reads, answered, strict=True):
        assert code == 0, f"{command}: exit {code}\n{out}{err}"

    # The shop's codec server: the same reads with its endpoint instead of its code.
    server = CodecServer(load_codec("shopapp.codec:ShopCodec.from_environment"), port=0)
    with server:
        through = plain | {"AGENTLEDGER_CODEC_ENDPOINT": server.url}
        answered = await asyncio.gather(*(shop_command(through, *c, cwd=tmp_path) for c in reads))
        for command, (code, out, err) in zip(reads, answered, strict=True):
            assert code == 0, f"{command} via {server.url}: exit {code}\n{out}{err}"
