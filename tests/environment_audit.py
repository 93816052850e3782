"""Run in a process of its own by tests/test_environment_at_the_edges.py: every read of
os.environ made by agentledger's code while the plugin is imported, configured on a Client and
a Worker (with a named model provider), and a fault point is passed, printed as JSON
(`[module, ...]`).

    python -m tests.environment_audit TEMPORAL_ADDRESS DATABASE_URL MODEL_URL
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from types import FrameType
from typing import Any

READS: list[str] = []


class AuditedEnviron(os._Environ):  # type: ignore[type-arg]
    """os.environ, noting each agentledger module that reads it."""

    def _note(self) -> None:
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if module.startswith("agentledger"):
                READS.append(f"{module}:{frame.f_lineno}")
                return
            if not module.startswith(("os", "_collections_abc", "collections")):
                return
            frame = frame.f_back

    def __getitem__(self, key: str) -> str:
        self._note()
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        self._note()
        return super().__iter__()


def audit_environ() -> None:
    env = os.environ
    os.environ = AuditedEnviron(  # type: ignore[assignment]  # noqa: B003 (the same data)
        env._data,  # type: ignore[attr-defined]
        env.encodekey,  # type: ignore[attr-defined]
        env.decodekey,  # type: ignore[attr-defined]
        env.encodevalue,  # type: ignore[attr-defined]
        env.decodevalue,  # type: ignore[attr-defined]
    )


async def main(address: str, database_url: str, model_url: str) -> None:
    from temporalio.client import Client
    from temporalio.worker import Replayer, Worker

    from agentledger import AgentLedgerConfig, AgentLedgerPlugin
    from agentledger.core import faults

    # A named provider whose key the application read from its variable (the edge), so the
    # engine is handed it and reads none.
    provider = {"base_url": model_url, "api_key_env": "AUDIT_PROVIDER_KEY"}
    config = AgentLedgerConfig(
        database_url=database_url,
        openai_base_url=model_url,
        demo=True,
        providers=json.dumps({"audited": provider}),
        provider_keys={"audited": "given-by-the-application"},
    )
    plugin = AgentLedgerPlugin(config)
    client = await Client.connect(address, plugins=[plugin])
    Worker(client, task_queue="environment-audit", workflows=[], activities=[])
    Replayer(workflows=[], plugins=[plugin])
    faults.fire("tool.before_run", "send_message")  # armed only by a plan a test installs


if __name__ == "__main__":
    audit_environ()
    asyncio.run(main(*sys.argv[1:4]))
    print(json.dumps(sorted(set(READS))))
