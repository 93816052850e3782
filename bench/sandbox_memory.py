"""What one cached run's sandbox costs: `python -m bench.sandbox_memory [--runs 200]`.

The workflow sandbox imports a workflow's module (and every module of ours it imports that
is not passed through) afresh for each run it holds. This creates that many sandboxed
`AgentRunWorkflow` instances with the worker's own passthrough list, first as the sandbox
does alone, then with the code objects shared as the worker shares them
(agentledger/worker/workflow_code.py), and prints the memory and CPU each one costs, side by
side, and the modules each one executes anew. No server is involved: it measures the module
copies alone, not a run's state.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
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

from agentledger.worker.worker_factory import worker_tuning  # noqa: E402
from agentledger.worker.workflow_code import share_workflow_code  # noqa: E402
from agentledger.workflows import AgentRunWorkflow  # noqa: E402


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


async def measure(runs: int) -> tuple[float, float, list[str]]:
    """KB and CPU ms each sandboxed instance adds, and the modules it executes anew."""
    runner: SandboxedWorkflowRunner = worker_tuning()["workflow_runner"]
    first = runner.create_instance(details())
    fresh = sorted(
        name
        for name, module in first.importer.new_modules.items()
        if sys.modules.get(name) is not module
    )
    # Memory by tracemalloc (what the instances allocate and keep), not RSS: freed memory
    # that the allocator keeps would hide the second measurement.
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held: list[WorkflowInstance] = [runner.create_instance(details()) for _ in range(runs)]
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del held
    cpu = time.process_time()
    for _ in range(runs):
        runner.create_instance(details())
    cpu = time.process_time() - cpu
    return kept / runs / 1024, cpu * 1000 / runs, fresh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="instances to hold at once")
    args = parser.parse_args(argv)
    alone_kb, alone_ms, fresh = asyncio.run(measure(args.runs))
    share_workflow_code([AgentRunWorkflow])
    shared_kb, shared_ms, _ = asyncio.run(measure(args.runs))
    print(
        f"per sandboxed run ({args.runs} held): the sandbox alone {alone_kb:.0f} KB, "
        f"{alone_ms:.2f} ms CPU; code shared {shared_kb:.0f} KB, {shared_ms:.2f} ms CPU"
    )
    print(f"modules executed anew per run ({len(fresh)}): {', '.join(fresh)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
