"""Ctrl-C (and SIGTERM) for the commands that start things: `up` and `demo`.

A terminal's Ctrl-C reaches the whole foreground process group: the command, and the dev
server and initdb it started. The command takes the signal as an event on its loop from its
first moment, so at any point of a start it gives the start up, stops what had started and
says so in one line; a second Ctrl-C while it stops hurries it (the drain is cut short)
instead of raising a traceback.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentledger.dev.stack import EmbeddedStack

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A Ctrl-C ended the command; the message says what it left behind (exit 130)."""

    exit_code = 130


class Interrupts:
    """SIGINT and SIGTERM on the running loop: the first sets `stop`, a second `hurry`."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.hurry = asyncio.Event()
        self._on_hurry: list[Callable[[], None]] = []

    async def install(self) -> Interrupts:
        """Take the signals from here on. A Ctrl-C that came before (asyncio.run's own
        handler cancels the command's task) counts as the first."""
        loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._signalled)
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            raise Interrupted("interrupted before anything started") from None
        return self

    def on_hurry(self, action: Callable[[], None]) -> None:
        self._on_hurry.append(action)

    def _signalled(self) -> None:
        if not self.stop.is_set():
            self.stop.set()
            return
        self.hurry.set()
        for action in self._on_hurry:
            action()


async def start_stack(stack: EmbeddedStack, interrupts: Interrupts) -> dict[str, str]:
    """The stack started (its endpoints), or Interrupted once a Ctrl-C during the start has
    stopped every part it had started. The start runs in a thread so the loop hears the
    signal while a part is still coming up."""
    starting = asyncio.ensure_future(asyncio.to_thread(stack.start))
    stopping = asyncio.ensure_future(interrupts.stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not interrupts.stop.is_set():
        stopping.cancel()
        return starting.result()
    stack.abandon()
    try:
        await starting
    except Exception:  # the abandoned start stopped what it had started
        pass
    else:  # it was up before it heard: stop it as a whole
        await asyncio.to_thread(stack.stop)
    raise Interrupted(stopped_line(stack.home))


def stopped_line(home: Path) -> str:
    return f"interrupted: the stack is stopped, its data kept in {home.resolve()}"
