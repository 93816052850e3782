"""The shop's Temporal wiring: its client (its own encryption, OpenTelemetry) and its worker."""

import os

from temporalio.client import Client
from temporalio.contrib.opentelemetry import OpenTelemetryPlugin
from temporalio.converter import DataConverter
from temporalio.worker import Worker

from agentledger import AgentLedgerConfig, AgentLedgerPlugin  # agentledger
from shopapp.activities import check_order
from shopapp.codec import ShopCodec
from shopapp.workflows import OrderReview

TASK_QUEUE = os.environ.get("SHOP_TASK_QUEUE", "shop")
TRACING = OpenTelemetryPlugin(add_temporal_spans=True)
DB, MODELS = os.environ["DATABASE_URL"], os.environ["OPENAI_BASE_URL"]  # agentledger
AGENTLEDGER = AgentLedgerConfig(database_url=DB, openai_base_url=MODELS, demo=True)  # agentledger


async def connect(address: str) -> Client:
    return await Client.connect(
        address,
        data_converter=DataConverter(payload_codec=ShopCodec.from_environment()),
        plugins=[TRACING, AgentLedgerPlugin(AGENTLEDGER)],  # agentledger
    )


def worker(client: Client) -> Worker:
    return Worker(client, task_queue=TASK_QUEUE, workflows=[OrderReview], activities=[check_order])
