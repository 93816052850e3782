"""What one cached run's sandbox costs: `python -m bench.sandbox_memory [--runs 200]`.

The workflow sandbox imports a workflow's module (and every module of ours it imports that
is not passed through) afresh for each run it holds. This creates that many sandboxed
`AgentRunWorkflow` instances the way the worker does, with the worker's own passthrough
list, and prints the memory each one adds and the modules each one executes anew. No
server is involved: it measures the module copies alone, not a run's state.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import temporalio.converter  # noqa: E402
import temporalio.workflow  # noqa: E402
from temporalio.api.common.v1 import Payloads  # noqa: E402
from temporalio.api.failure.v1 import Failure  # noqa: E402
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails  # noqa: E402
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner  # noqa: E402
from temporalio.worker.workflow_sandbox._runner import _fake_info  # noqa: E402

from agentrun.worker.worker_factory import worker_tuning  # noqa: E402
from bench.harness import rss_bytes  # noqa: E402
from workflows import AgentRunWorkflow  # noqa: E402


def details() -> WorkflowInstanceDetails:
    converter = temporalio.converter.DataConverter.default
    return WorkflowInstanceDetails(
        payload_converter_factory=converter._new_payload_converter,
        failure_converter_class=converter.failure_converter_class,
        interceptor_classes=[],
        defn=temporalio.workflow._Definition.from_class(AgentRunWorkflow),
        info=_fake_info,
        randomness_seed=-1,
        extern_functions={},
        disable_eager_activity_execution=False,
        worker_level_failure_exception_types=[],
        patch_activation_callback=None,
        last_completion_result=Payloads(),
        last_failure=Failure(),
    )


async def measure(runs: int) -> tuple[float, list[str]]:
    """KB each sandboxed instance adds, and the modules of ours each one executes anew."""
    import os

    runner: SandboxedWorkflowRunner = worker_tuning()["workflow_runner"]
    first = runner.create_instance(details())
    fresh = sorted(
        name
        for name, module in first.importer.new_modules.items()
        if sys.modules.get(name) is not module
    )
    gc.collect()
    before = rss_bytes(os.getpid()) or 0
    held: list[WorkflowInstance] = [runner.create_instance(details()) for _ in range(runs)]
    gc.collect()
    after = rss_bytes(os.getpid()) or 0
    del held
    return (after - before) / runs / 1024, fresh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="instances to hold at once")
    args = parser.parse_args(argv)
    per_run, fresh = asyncio.run(measure(args.runs))
    print(f"{per_run:.0f} KB per sandboxed run ({args.runs} held)")
    print(f"modules executed anew per run ({len(fresh)}): {', '.join(fresh)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
