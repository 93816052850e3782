"""AgentLedgerPlugin and RunClient.on refuse what cannot work, before anything runs, and say
what to do: the plugin on a Worker but not its Client, a payload converter that cannot read
agentledger's models, a config with no tools, a client connected without the plugin. A worker
of the user's on another queue than the one the plugin is told is left as it was."""

from __future__ import annotations

import pytest
from temporalio import activity
from temporalio.client import Client
from temporalio.converter import DataConverter, DefaultPayloadConverter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agentledger import AgentLedgerConfig, AgentLedgerPlugin, RunClient
from agentledger.core.errors import SetupError
from agentledger.workflows import AgentRunWorkflow


class PlainJson(DefaultPayloadConverter):
    """A user's own converter, not built on pydantic."""


def config(**fields: object) -> AgentLedgerConfig:
    return AgentLedgerConfig(
        database_url="postgresql://u@localhost/db", openai_base_url="http://m/v1", **fields
    )


def client_with(env: WorkflowEnvironment, *plugins: AgentLedgerPlugin) -> Client:
    options = env.client.config()
    options["plugins"] = list(plugins)
    options["data_converter"] = DataConverter.default
    return Client(**options)


def test_on_the_worker_but_not_the_client(env: WorkflowEnvironment):
    with pytest.raises(SetupError, match=r"Client\.connect"):
        Worker(
            client_with(env),
            task_queue="q",
            activities=[],
            plugins=[AgentLedgerPlugin(config(demo=True))],
        )


def test_a_converter_that_cannot_read_agentledger_s_models(env: WorkflowEnvironment):
    options = env.client.config()
    options["data_converter"] = DataConverter(payload_converter_class=PlainJson)
    options["plugins"] = [AgentLedgerPlugin(config(demo=True))]
    with pytest.raises(SetupError, match="pydantic"):
        Client(**options)


def test_no_tools(env: WorkflowEnvironment):
    client = client_with(env, AgentLedgerPlugin(config()))
    with pytest.raises(SetupError, match="names no tools"):
        Worker(client, task_queue="q", activities=[_noop])


async def test_a_worker_on_another_queue_is_left_alone(env: WorkflowEnvironment):
    client = client_with(env, AgentLedgerPlugin(config(demo=True, engine_queue="agent-runs")))
    mine = Worker(client, task_queue="orders", workflows=[], activities=[_noop])
    engine = Worker(client, task_queue="agent-runs", workflows=[], activities=[])
    assert mine.config(active_config=True)["workflows"] == []
    assert AgentRunWorkflow in engine.config(active_config=True)["workflows"]


def test_run_client_on_a_client_without_the_plugin(env: WorkflowEnvironment):
    with pytest.raises(SetupError, match="AgentLedgerPlugin"):
        RunClient.on(client_with(env), config(demo=True))


@activity.defn
async def _noop() -> None:
    """An activity of the user's."""
