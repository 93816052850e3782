"""The user's own workflows: a package named `workflows`, as in Temporal's samples."""

from datetime import timedelta

from temporalio import workflow

# What a check reads to know this package, not some installed one, is `workflows`.
OWNER = "the user's project"


@workflow.defn
class OrderWorkflow:
    """The user's business workflow (not served here; its import is what is checked)."""

    @workflow.run
    async def run(self, order_id: int) -> str:
        await workflow.sleep(timedelta(seconds=0))
        return f"order {order_id}"
