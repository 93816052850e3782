"""The SDK's workflow sandbox, answering its payload passes' context questions outside it
when nothing would read the answer.

Around every workflow activation the worker visits each payload of the activation and of
its completion several times (the codec, external storage and their references), and for
each visit asks the run's workflow instance which serialization context, and which store
context, the payload's command has. The sandbox answers by running code inside itself (its
import hooks and restricted builtins put in place and taken down again each time): about a
sixth of a worker's CPU at 100 concurrent runs. The answers are
handed to the payload codec and to external storage alone. A converter with neither does the
same with any answer, so for one the instance answers "no context" itself. The workflow's
own code still runs in the sandbox with every restriction; a converter with a codec or
external storage keeps the SDK's sandbox as it is, each context asked inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio import workflow
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import DataConverter, SerializationContext, StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

# What each question is answered with: the context-free converter, an empty store context.
NO_STORE_CONTEXT = StorageDriverStoreContext()


@dataclass(frozen=True)
class ContextFreeSandbox(SandboxedWorkflowRunner):
    """The SDK's sandbox whose instances answer the payload passes' context questions with
    "none", without entering the sandbox. Only for a worker whose converter has no codec and
    no external storage (`for_converter` decides). A plugin that adds passthrough modules with
    `dataclasses.replace(runner, restrictions=...)`, as the SDK's own plugins do, keeps it."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextFreeInstance(super().create_instance(det))


class _ContextFreeInstance(WorkflowInstance):
    """A sandboxed instance; activations go to it, the context questions stop here."""

    def __init__(self, sandboxed: WorkflowInstance) -> None:
        self.sandboxed = sandboxed

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self.sandboxed.activate(act)

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        return None

    def get_external_store_context(self, command_info: Any) -> StorageDriverStoreContext:
        return NO_STORE_CONTEXT

    def get_info(self) -> workflow.Info:
        return self.sandboxed.get_info()

    def get_thread_id(self) -> int | None:
        return self.sandboxed.get_thread_id()


def reads_no_context(converter: DataConverter) -> bool:
    """Whether `converter`'s payload passes do the same whatever context they are given."""
    return converter.payload_codec is None and converter.external_storage is None


def for_converter(runner: WorkflowRunner, converter: DataConverter) -> WorkflowRunner:
    """`runner` for a worker whose client converts with `converter`: the SDK's sandbox becomes
    a ContextFreeSandbox with the same restrictions when the converter reads no context; any
    other runner (unsandboxed, one of your own) and any other converter are left as they
    are."""
    if type(runner) is not SandboxedWorkflowRunner or not reads_no_context(converter):
        return runner
    return ContextFreeSandbox(restrictions=runner.restrictions, runner_class=runner.runner_class)
