"""A worker whose converter has no codec and no external storage runs workflows in the
SDK's sandbox without entering it for the payload passes' context questions
(agentledger.worker.sandbox_contexts): its runs still round-trip their payloads, its
workflow code is still held to the sandbox's restrictions, and a converter that would read
a context keeps the SDK's sandbox as it is."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import (
    RestrictedWorkflowAccessError,
    SandboxedWorkflowRunner,
)

from agentledger import AgentLedgerConfig, AgentLedgerPlugin
from agentledger.worker.sandbox_contexts import ContextFreeSandbox, for_converter
from agentledger.workflows.engine import SANDBOX_PASSTHROUGH, sandboxed_runner
from tests.sandbox_probe import ClockWorkflow, EchoWorkflow, shout


class Passing(PayloadCodec):
    """A codec of a user's own: its payloads may depend on the context it is given."""

    async def encode(self, payloads):  # type: ignore[no-untyped-def]
        return list(payloads)

    async def decode(self, payloads):  # type: ignore[no-untyped-def]
        return list(payloads)


def test_only_the_sdk_sandbox_under_a_converter_that_reads_no_context():
    sandbox = sandboxed_runner()
    runner = for_converter(sandbox, pydantic_data_converter)
    assert isinstance(runner, ContextFreeSandbox)
    assert runner.restrictions == sandbox.restrictions
    # A plugin adding passthrough modules the way the SDK's own plugins do keeps it.
    widened = dataclasses.replace(
        runner, restrictions=runner.restrictions.with_passthrough_modules("shop")
    )
    assert isinstance(widened, ContextFreeSandbox)
    with_codec = dataclasses.replace(pydantic_data_converter, payload_codec=Passing())
    assert for_converter(sandbox, with_codec) is sandbox
    unsandboxed = UnsandboxedWorkflowRunner()
    assert for_converter(unsandboxed, pydantic_data_converter) is unsandboxed


def plugin_worker(env: WorkflowEnvironment, converter: DataConverter) -> Worker:
    options = env.client.config()
    config = AgentLedgerConfig(
        database_url="postgresql://u@localhost/db", openai_base_url="http://m/v1", demo=True
    )
    options["plugins"] = [AgentLedgerPlugin(config)]
    options["data_converter"] = converter
    return Worker(Client(**options), task_queue=f"q-{uuid.uuid4().hex[:8]}")


async def test_the_plugin_picks_the_runner_by_its_client_s_converter(env: WorkflowEnvironment):
    runner = plugin_worker(env, DataConverter.default).config(active_config=True)["workflow_runner"]
    assert isinstance(runner, ContextFreeSandbox)
    assert set(SANDBOX_PASSTHROUGH) <= runner.restrictions.passthrough_modules
    coded = dataclasses.replace(DataConverter.default, payload_codec=Passing())
    runner = plugin_worker(env, coded).config(active_config=True)["workflow_runner"]
    assert type(runner) is SandboxedWorkflowRunner


async def test_runs_round_trip_their_payloads_and_keep_the_sandbox_s_restrictions(
    env: WorkflowEnvironment,
):
    client = env.client
    runner = for_converter(sandboxed_runner(), client.data_converter)
    assert isinstance(runner, ContextFreeSandbox)
    queue = f"probe-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[EchoWorkflow, ClockWorkflow],
        activities=[shout],
        workflow_runner=runner,
        workflow_failure_exception_types=[RestrictedWorkflowAccessError],
    ):
        said = await client.execute_workflow(
            EchoWorkflow.run, "héllo", id=f"echo-{uuid.uuid4()}", task_queue=queue
        )
        assert said == "ProbeEcho: HÉLLO!"
        with pytest.raises(WorkflowFailureError) as refused:
            await client.execute_workflow(
                ClockWorkflow.run, id=f"clock-{uuid.uuid4()}", task_queue=queue
            )
    assert "datetime.datetime.now" in str(refused.value.cause)
