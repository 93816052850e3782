"""The user's worker: agentledger's engine with the user's tools, in the user's own process."""

import asyncio
import logging
import signal

import agentledger
from activities import refunds


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await agentledger.run_worker([refunds.registry], identity="user-worker", stop=stop)


if __name__ == "__main__":
    asyncio.run(main())
