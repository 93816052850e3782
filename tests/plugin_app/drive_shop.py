"""The shop's whole story from its own folder, with agentledger installed from the wheel
(scripts/wheel_check.sh, step 6): its worker with `AgentLedgerPlugin`, its workflow running an
agent that asks for approval, the approval sent through a RunClient on the shop's own Client,
the run's receipt, both histories replayed, every stored payload sealed by the shop's codec.
Only the shop's code and agentledger's public API are imported. Exits 0 and prints one line, or
raises saying what did not hold.

    DATABASE_URL=... OPENAI_BASE_URL=... SHOP_ENCRYPTION_KEY=... python drive_shop.py ADDRESS
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from google.protobuf.message import Message
from opentelemetry import trace
from shopapp import app
from shopapp.activities import Order
from shopapp.codec import ShopCodec
from shopapp.workflows import OrderReview
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.opentelemetry import create_tracer_provider
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

import agentledger
from agentledger import AgentLedgerPlugin, RunClient

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, seconds: float = 90) -> T:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.5)
    raise AssertionError(f"no {what} within {seconds:.0f} s")


async def main(address: str) -> None:
    assert "site-packages" in str(agentledger.__file__), f"agentledger from {agentledger.__file__}"
    # The shop traces with the SDK's OpenTelemetry plugin, which wants its provider set.
    trace.set_tracer_provider(create_tracer_provider())
    client: Client = await app.connect(address)
    order = Order(order_id=f"o-{uuid.uuid4().hex[:8]}", customer="ana@example.com", amount_usd=42)
    parent_id = f"review-{order.order_id}"
    async with app.worker(client), RunClient.on(client, app.AGENTLEDGER) as run_client:
        handle = await client.start_workflow(
            OrderReview.run, order, id=parent_id, task_queue=app.TASK_QUEUE
        )

        async def child_id() -> str | None:
            for event in (await handle.fetch_history()).events:
                if event.HasField("child_workflow_execution_started_event_attributes"):
                    started = event.child_workflow_execution_started_event_attributes
                    return str(started.workflow_execution.workflow_id)
            return None

        agent_run = await eventually(child_id, "agent run started by the shop's workflow")

        async def pending() -> str | None:
            state = await run_client.runs.status(agent_run)
            return state.pending_approval.tool if state.pending_approval else None

        tool = await eventually(pending, f"approval asked for by {agent_run}")
        assert tool == "send_message", tool
        decision = await run_client.runs.approve(agent_run, by="maria", role="approver")
        assert decision.decision == "approved", decision
        review = await handle.result()
        receipt = await run_client.runs.receipt(agent_run)
        parent = await handle.fetch_history()
        child = await client.get_workflow_handle(agent_run).fetch_history()
    assert review.agent_run_id == agent_run and review.agent_status == "completed", review
    assert receipt.outcome == "completed", receipt

    codec = ShopCodec.from_environment()
    replayer = Replayer(
        workflows=[OrderReview],
        data_converter=DataConverter(payload_codec=codec),
        plugins=[AgentLedgerPlugin(app.AGENTLEDGER)],
    )
    for history in (parent, child):
        await replayer.replay_workflow(history)

    # Through a client without the codec: what the server stores.
    raw = await Client.connect(address)
    for workflow_id in (parent_id, agent_run):
        events = (await raw.get_workflow_handle(workflow_id).fetch_history()).events
        stored = [payload for event in events for payload in _sealable(event)]
        encodings = {payload.metadata.get("encoding") for payload in stored}
        assert encodings == {b"binary/shop-encrypted"}, (workflow_id, encodings)
    print(
        f"drive_shop: {parent_id} and its agent {agent_run}: approved, completed, replayed, sealed"
    )


def _sealable(event: Any) -> list[Payload]:
    """The Payloads in a history event a codec sees: not a patch marker's id, nor a local
    activity marker's record of the call, which the SDK's core writes of its own (the call's
    result and failure beside it are sealed)."""
    marker = event.marker_recorded_event_attributes
    if marker.marker_name == "core_patch":
        return []
    if marker.marker_name == "core_local_activity":
        found = [p for key, ps in marker.details.items() if key != "data" for p in ps.payloads]
        return found + (_payloads(marker.failure) if marker.HasField("failure") else [])
    return _payloads(event)


def _payloads(message: Message) -> list[Payload]:
    """The Payloads in an event (inputs, results, signals), but headers and search
    attributes, which no codec sees (tests/test_plugin_app.py says why)."""
    if isinstance(message, Payload):
        return [message]
    found: list[Payload] = []
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
            found += _payloads(each)
    return found


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
