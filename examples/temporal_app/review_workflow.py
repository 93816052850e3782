"""Your own workflow, which asks an agent and waits for its run (a module of its own: the
workflow sandbox imports workflows from their modules, never from a script run as __main__)."""

from temporalio import workflow

# agentledger's imports pass through the sandbox, as any library a workflow uses does: the
# package brings its worker (HTTP clients, a database driver) beside the workflow code.
with workflow.unsafe.imports_passed_through():
    from agentledger import RunSpec
    from agentledger.workflows import run_agent


@workflow.defn
class OrderReview:
    @workflow.run
    async def run(self, task: str) -> str:
        # The agent's run is a child of this workflow; its id is `run-~child.<this id>~<key>`.
        result = await run_agent(RunSpec(task=task), key="agent")
        return f"{result.run_id} {result.status.value}"
