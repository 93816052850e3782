"""Options every command of the CLI shares, so each means the same everywhere."""

from __future__ import annotations

import argparse

from agentrun.worker_presence import DEFAULT_WAIT_SECONDS


def add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wait",
        type=float,
        default=DEFAULT_WAIT_SECONDS,
        help=f"seconds to wait for an answer before saying why none came "
        f"(default {DEFAULT_WAIT_SECONDS:g})",
    )


def add_tenant(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", help="only this tenant's runs (default AGENTRUN_TENANT)")
