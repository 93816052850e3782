"""Run agentledger's entry points (the CLI, the worker, the codec server) once per case, in this
one process, with each case's variables set in the process environment; print the results.

Importing the entry points costs seconds on a busy machine, so tests/test_settings_from_
environment.py runs its dozens of cases through one process of this script rather than one
process each. Input (stdin): a JSON list of {"entry", "args", "env"}; output (stdout): a JSON
list of {"code", "out", "err"}; an exception that escapes an entry point is its traceback in
"err", as a process of its own would have printed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from agentledger.cli.main import main as cli_main
from agentledger.temporal.codec_server import main as codec_main
from agentledger.worker.main import main as worker_main

ENTRIES: dict[str, tuple[str, Callable[[], Any]]] = {
    "cli": ("agentledger", lambda: cli_main(sys.argv[1:])),
    "worker": ("agentledger-worker", worker_main),
    "codec server": ("codec_server", codec_main),
}


def run(entry: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    name, function = ENTRIES[entry]
    saved_env, saved_argv = dict(os.environ), sys.argv
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [name, *args]
    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = function()
            except SystemExit as exit:
                code = exit.code
            except BaseException:
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
    return {"code": 0 if code is None else code, "out": out.getvalue(), "err": err.getvalue()}


def main() -> None:
    cases = json.load(sys.stdin)
    results = [run(case["entry"], case["args"], case["env"]) for case in cases]
    sys.stdout.write(json.dumps(results))
    sys.stdout.flush()
    os._exit(0)  # the Temporal client's threads may outlive the loops (see agentledger.cli.main)


if __name__ == "__main__":
    main()
