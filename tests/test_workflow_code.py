"""Every run a worker holds executes the workflow modules in its own namespace, from one copy
of their code."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import agentledger.workflows
from agentledger.worker.workflow_code import share_workflow_code
from agentledger.workflows import AgentRunWorkflow


def import_afresh(name: str) -> ModuleType:
    """What the sandbox does for each run: the import system's search (sys.meta_path) for a
    module its own sys.modules lacks, then a new module executed from the found spec."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        spec = find_spec(name, agentledger.workflows.__path__) if find_spec else None
        if spec is not None:
            break
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_runs_share_the_code_and_nothing_else():
    share_workflow_code([AgentRunWorkflow])
    first, second = (
        import_afresh("agentledger.workflows.run_stream"),
        import_afresh("agentledger.workflows.run_stream"),
    )
    assert first is not second and first.RunStream is not second.RunStream
    assert first.RunStream.publish is not second.RunStream.publish
    assert first.RunStream.publish.__code__ is second.RunStream.publish.__code__
    share_workflow_code([AgentRunWorkflow])  # idempotent: one finder however often asked
    assert sum(type(f).__name__ == "_SharedCodeFinder" for f in sys.meta_path) == 1
