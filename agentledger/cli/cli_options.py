"""Options every command of the CLI shares, so each means the same everywhere."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from agentledger.core.constants import DEFAULT_WAIT_SECONDS
from agentledger.core.log_setup import LEVELS


def seconds(text: str) -> float:
    """A bound in seconds: a finite number above 0 (a negative or NaN bound cannot bound)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"takes seconds above 0 (e.g. 10), not {text!r}")
    return value


def count(text: str) -> int:
    """How many: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number, 1 or more, not {text!r}")
    return value


JSON_HELP = "print JSON for machines; an error is one JSON object on stderr"
LOG_LEVEL_HELP = (
    "what to log on stderr (default AGENTLEDGER_LOG_LEVEL, else INFO; other libraries' records "
    "from WARNING up, all at DEBUG); AGENTLEDGER_LOG_FORMAT=json writes one JSON object per line"
)


def add_output_flags(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """`--json` and `--log-level`, taken before a command or after it alike. Only the top
    parser gives them defaults: a command's parser sets them only when typed, so it never
    overwrites what was typed before the command's name."""
    unset: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("--json", action="store_true", help=JSON_HELP, **unset)
    p.add_argument("--log-level", type=str.upper, choices=LEVELS, help=LOG_LEVEL_HELP, **unset)


def emit(data: Any, as_json: bool, text: str) -> None:
    """The answer: JSON for machines, else text with control characters shown, not obeyed.
    Flushed at once: a reader on a pipe (a supervisor, a script waiting for `serve`'s URL)
    gets it when it is said, not when the buffer fills or the process ends."""
    if as_json:
        print(json.dumps(data, indent=2, default=str), flush=True)
    else:
        from agentledger.cli import render

        print(render.for_terminal(text), flush=True)


def say(args: argparse.Namespace, text: str) -> None:
    """Progress for a person: on stdout, or on stderr when stdout carries JSON."""
    print(text, file=sys.stderr if args.json else sys.stdout, flush=True)


def add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait",
        type=seconds,
        default=DEFAULT_WAIT_SECONDS,
        help=f"seconds to wait for an answer before saying why none came "
        f"(default {DEFAULT_WAIT_SECONDS:g})",
    )


def add_to_each(commands: Any) -> None:
    """`--tenant`, `--json`, `--log-level` and `--wait` on every command of a group."""
    for each in commands.choices.values():
        add_tenant(each)
        add_output_flags(each)
        add_wait(each)


def add_run(p: argparse.ArgumentParser) -> None:
    """The run a command acts on, by the id `start` and `list` print."""
    p.add_argument("run", help="the run's id, as `start` and `list` print it")


def add_tenant(p: argparse.ArgumentParser) -> None:
    """`--tenant`, narrowing the command's caller to that tenant (the client refuses one
    that would widen it past AGENTLEDGER_TENANT)."""
    p.add_argument(
        "--tenant",
        dest="acting_tenant",
        help="only this tenant's runs (default AGENTLEDGER_TENANT)",
    )


def add_decider(p: argparse.ArgumentParser) -> None:
    """Who decides, how the decision is bound to what they saw, and whose run it is."""
    p.add_argument("--by", required=True, help="who decides: signs with their approver key")
    p.add_argument(
        "--role",
        help="the role, for an unsigned decision (a signed one carries its key's role)",
    )
    p.add_argument(
        "--action-hash",
        help="decide only if the pending action is still this one (from `status`)",
    )
    add_tenant(p)


def own_workflows(references: list[str]) -> list[type]:
    """`--workflows PKG.MODULE:ATTR`: a deployment's own workflow classes (one, or a list)."""
    from agentledger.core.errors import InvalidRequest
    from agentledger.tools.loading import resolve

    found: list[type] = []
    for reference in references:
        try:
            target = resolve(reference)
        except Exception as err:  # a bad reference is the user's input, named as such
            raise InvalidRequest(f"--workflows {reference}: {err}") from err
        found += list(target) if isinstance(target, list | tuple) else [target]
    return found
