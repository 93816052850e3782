"""Start one agent run and print its result, as the Temporal SDK's samples start theirs.

    python starter.py up                                # terminal 1: the stack and a worker
    python starter.py "Summarize our refund policy."    # terminal 2: one run, its result

A Client connected with `AgentLedgerPlugin`, one run started on it and its result awaited:
`main` below, which a program (or a test) calls with a Client of its own. The run starts
through `RunClient`, the way every run starts, so it runs under its tenant's policy (the
run waits for a person where that policy asks one to approve a step: `python starter.py
approve RUN --by NAME --role approver`). With no task it runs a sample one. A Ctrl-C stops
the waiting, never the run: it is Temporal's, and `python starter.py status RUN` finds it.

With a command instead, this is the `agentledger` command line, for a checkout without the
console script: `python starter.py demo`, `python starter.py start --task ...`,
`python starter.py --help`. A flag, or a single word, is a command (a mistyped one is named
as the command line names it, never started as a task); a task is a sentence.
"""

import sys
from collections.abc import Sequence


def is_command(argv: Sequence[str]) -> bool:
    """Whether the arguments are for the `agentledger` command line, not a task."""
    return len(argv) > 1 or (len(argv) == 1 and (argv[0].startswith("-") or " " not in argv[0]))


if __name__ == "__main__" and is_command(sys.argv[1:]):
    # Before the imports below: a command imports only what it needs, so `--help` is quick.
    import runpy

    runpy.run_module("agentledger", run_name="__main__", alter_sys=True)

import asyncio  # noqa: E402
import os  # noqa: E402

from temporalio.client import Client  # noqa: E402

from agentledger import (  # noqa: E402
    AgentLedgerConfig,
    AgentLedgerError,
    AgentLedgerPlugin,
    RunClient,
)
from agentledger.types import RunResult  # noqa: E402

TASK = "Summarize our refund policy."


async def main(
    task: str = TASK, client: Client | None = None, config: AgentLedgerConfig | None = None
) -> RunResult:
    # The environment, and the stack `python starter.py up` started, read once.
    config = config or AgentLedgerConfig.load()
    if client is None:
        client = await Client.connect(
            **config.client_connect_config(), plugins=[AgentLedgerPlugin(config)]
        )
    async with RunClient.on(client, config) as agentledger_client:
        started = await agentledger_client.runs.start(task)
        print(f"Started {started.run_id}: {config.run_link(started.run_id)}", flush=True)
        result = await agentledger_client.runs.result(started.run_id)
    print(f"Result: {result.status.value}\n{result.answer or result.error or ''}")
    return result


def run(task: str) -> int:
    """`python starter.py [TASK]`: its exit code, 0 when the run completed."""
    try:
        ended = asyncio.run(main(task))
    except AgentLedgerError as err:  # a setting, a refusal, a service unreachable: one line
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except RuntimeError as err:  # Client.connect's, when no Temporal server answers there
        if not str(err).startswith("Failed client connect"):
            raise
        print(f"error: {err}\nstart the stack (`python starter.py up`), or set TEMPORAL_ADDRESS",
              file=sys.stderr)  # fmt: skip
        return 4
    except KeyboardInterrupt:
        print("interrupted: the run goes on (`python starter.py list`)", file=sys.stderr)
        return 130
    return 0 if ended.status.value == "completed" else 1


if __name__ == "__main__":
    code = run(sys.argv[1].strip() if sys.argv[1:] else TASK)
    # The Temporal client's native threads can abort the interpreter's teardown
    # (temporalio/sdk-python#300): flush, then exit without it, as the `agentledger` command does.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
