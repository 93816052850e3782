"""The `agentledger` console script (and `python -m agentledger`).

It imports nothing heavy itself: importing the command line takes up to a second on a busy
machine, and a Ctrl-C in that second ends the command in one line, not a traceback.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def console() -> NoReturn:
    try:
        from agentledger.cli import main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        os._exit(130)
    main.console()
