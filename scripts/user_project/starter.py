"""The user's starter: start a run, approve its refund, read its receipt (the public API)."""

import asyncio
import sys

import agentledger

TASK = 'Refund order 7. call refund {"order_id": 7, "cents": 1250}'


async def main() -> int:
    client = await agentledger.RunClient.connect()
    try:
        run_id = (
            await client.runs.start(TASK, idempotency_key=f"user-refund-{sys.argv[1]}")
        ).run_id
        for _ in range(600):
            pending = (await client.runs.status(run_id)).pending_approval
            if pending is not None:
                break
            await asyncio.sleep(0.1)
        else:
            print(f"{run_id} never asked for approval", file=sys.stderr)
            return 1
        assert pending.tool == "refund", pending
        decision = await client.runs.approve(run_id, by="user", role=pending.required_role)
        print(f"{run_id}: {decision.decision}")
        result = await client.runs.result(run_id)
        receipt = await client.runs.receipt(run_id)
    finally:
        await client.close()
    effects = [e for e in receipt.side_effects if e.tool == "refund"]
    print(
        f"{run_id}: {result.status.value}; receipt outcome {receipt.outcome.value}; "
        f"refunds in the receipt: {[e.output for e in effects]}"
    )
    ok = result.status.value == "completed" and receipt.outcome == "completed"
    return 0 if ok and len(effects) == 1 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
