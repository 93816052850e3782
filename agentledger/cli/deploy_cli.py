"""`agentledger deploy patches` and `agentledger deploy status`: what a deploy can retire."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agentledger.cli.cli_options import emit, own_workflows

if TYPE_CHECKING:
    from agentledger.client.run_client import RunClient


async def patches(client: RunClient, args: argparse.Namespace) -> int:
    """Each version branch left in the workflow code, the open runs that still need its old
    path, and whether it can go; exit 1 when an open run needs a retired branch."""
    inventory = await client.deploys.patches(workflows=own_workflows(args.workflows))
    lines = [f"{len(inventory.live)} version branch(es) left; {inventory.scanned} open run(s) read"]
    for use in inventory.live:
        lines.append(f"  {use.branch.id} ({use.branch.kind}, {use.branch.where}): {use.advice}")
        lines += [f"    {run}" for run in use.open_runs[:20]]
        lines.append(f"    removal: {use.branch.removal}")
    for need in inventory.retired:
        lines.append(f"RETIRED {need.workflow_id}: {need.message()}")
    emit(inventory.json_view(), args.json, "\n".join(lines))
    return 1 if inventory.retired else 0


async def status(client: RunClient, args: argparse.Namespace) -> int:
    """The builds, their open runs, and which can be retired."""
    found = await client.deploys.status(
        deployment=args.deployment, workflows=own_workflows(args.workflows)
    )
    lines = [f"{found.deployment_name}: current build {found.current_build or '(none)'}"]
    for build in found.builds:
        state = "current" if build.current else "retirable" if build.retirable else "draining"
        lines.append(f"  {build.build_id}: {state}, {len(build.open_runs)} open run(s)")
        lines += [f"    {run}" for run in build.open_runs[:20]]
    if found.unversioned_runs:
        lines.append(f"  (unversioned): {len(found.unversioned_runs)} open run(s)")
    emit(found.json_view(), args.json, "\n".join(lines))
    return 0


COMMANDS: dict[str, Callable[[RunClient, argparse.Namespace], Awaitable[int]]] = {
    "patches": patches,
    "status": status,
}
