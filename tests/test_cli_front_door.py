"""`agentrun.RunClient` is the one front door, and the CLI a thin layer over it (issue 24).

Every command the parser offers is served by a RunClient method; no CLI module imports the
operations layer (`agentrun.ops`) or names it for a dynamic import; every method the CLI
calls on its client is a RunClient method; and RunClient's signatures name only public
types, so what the CLI can do, a Python program can do with the same names.
"""

from __future__ import annotations

import argparse
import ast
import collections.abc
import inspect
import typing
from pathlib import Path

from temporalio.client import Client

import agentrun
import agentrun.types
from agentrun.cli.main import COMMANDS, LOCAL, parser
from agentrun.client_api import RunClient
from agentrun.core.settings import Settings
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
CLI_FILES = [
    *sorted((ROOT / "agentrun" / "cli").glob("*.py")),
    ROOT / "agentrun" / "__main__.py",
    ROOT / "starter.py",
]
OPERATIONS = "agentrun.ops"
# The names CLI code gives its RunClient.
CLIENT_NAMES = {"runs", "stacked", "demo_runs"}

# Each command (a group's commands as "group command") and the RunClient methods it uses.
SERVED_BY = {
    "start": {"start_run"},
    "approve": {"approve", "approver_key"},
    "reject": {"reject", "approver_key"},
    "pause": {"pause"},
    "resume": {"resume"},
    "cancel": {"cancel"},
    "say": {"say"},
    "chat": {"chat", "approve", "reject", "end_session"},
    "end": {"end_session"},
    "status": {"inspect"},
    "receipt": {"receipt"},
    "mirror": {"check_mirror", "rebuild_mirror"},
    "watch": {"watch"},
    "fork": {"fork_run"},
    "deploy": {"deploy", "deploy_check", "deploy_patches", "deploy_status"},
    "version": {"version"},
    "list": {"list_runs"},
    "stats": {"stats"},
    "prune": {"prune"},
    "migrate": {"migrate"},
    "up": {"migrate"},
    "demo": {"start_run", "status", "approve", "result", "receipt"},
    "backlog enqueue": {
        "load_backlog_tasks",
        "backlog_enqueue",
        "backlog_link",
        "backlog_held_note",
    },
    "backlog list": {"backlog_tasks"},
    "backlog stop": {"backlog_stop"},
    "backlog resume": {"backlog_resume"},
    "backlog dead": {"backlog_dead"},
    "backlog retry": {"backlog_retry"},
    "tenants set": {"set_tenant"},
    "tenants list": {"tenants"},
    "approvers add": {"add_approver", "config_dir"},
    "approvers list": {"approvers"},
}
# Modules whose types may appear in RunClient's signatures besides agentrun's public ones.
PLAIN_MODULES = {"builtins", "typing", "collections.abc", "datetime", "pathlib", "types"}


def commands(p: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    """Every command the parser offers, a group's as "group command"."""
    found: set[str] = set()
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                below = commands(child, f"{prefix}{name} ")
                found |= below or {f"{prefix}{name}"}
    return found


def operations_named(path: Path) -> list[str]:
    """Where a file imports the operations layer, or names it as a string (importlib,
    sys.modules): each as "file:line: module"."""
    found = []
    for node in ast.walk(parse_python(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            modules = [node.value]
        else:
            continue
        found += [
            f"{path.name}:{node.lineno}: {module}"
            for module in modules
            if module == OPERATIONS or module.startswith(f"{OPERATIONS}.")
        ]
    return found


def client_calls(path: Path) -> set[str]:
    """The attributes CLI code reads off its RunClient (`runs.approve`, ...)."""
    return {
        node.attr
        for node in ast.walk(parse_python(path.read_text()))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in CLIENT_NAMES
    }


def test_no_cli_module_reaches_the_operations_layer_but_through_run_client():
    found = [hit for path in CLI_FILES for hit in operations_named(path)]
    assert not found, "the CLI calls agentrun.ops directly; go through RunClient:\n" + "\n".join(
        found
    )


def test_the_check_catches_an_import_of_the_operations_layer(tmp_path):
    """The check above would see each way of reaching the operations."""
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "from agentrun.ops import operations as ops\n"
        "from agentrun import ops\n"
        "import agentrun.ops.watch\n"
        "import importlib\n"
        "fork = importlib.import_module('agentrun.ops.fork_ops')\n"
    )
    found = operations_named(sneaky)
    assert [hit.split(": ")[1] for hit in found] == [
        "agentrun.ops",
        "agentrun.ops.operations",
        "agentrun.ops",
        "agentrun.ops.watch",
        "agentrun.ops.fork_ops",
    ]


def test_every_command_is_served_by_a_run_client_method():
    # A local command (no stack: completion, settings, sandbox) may be a group of its own.
    offered = {c for c in commands(parser()) if c.split()[0] not in LOCAL} | set(LOCAL)
    assert offered == set(SERVED_BY) | set(LOCAL), (
        "a command without a RunClient method (add one, and list it in SERVED_BY): "
        f"{sorted(offered ^ (set(SERVED_BY) | set(LOCAL)))}"
    )
    assert {c.split()[0] for c in SERVED_BY} == set(COMMANDS)
    missing = {
        command: sorted(name for name in names if not hasattr(RunClient, name))
        for command, names in SERVED_BY.items()
        if any(not hasattr(RunClient, name) for name in names)
    }
    assert not missing, f"RunClient lacks: {missing}"


def test_the_cli_calls_only_run_client_methods():
    instance = RunClient(None, Settings.model_construct())
    public = {name for name in dir(instance) if not name.startswith("_")}
    called = {name for path in CLI_FILES for name in client_calls(path)}
    assert called, "the CLI calls its RunClient somewhere"
    assert called <= public, f"not RunClient methods: {sorted(called - public)}"
    used = set().union(*SERVED_BY.values())
    assert used <= called | {"approver_key"}, f"listed but never called: {used - called}"


def classes_in(hint: object) -> set[type]:
    """The classes a type hint names, through generics and unions."""
    found = {hint} if isinstance(hint, type) else set()
    for arg in typing.get_args(hint):
        found |= classes_in(arg)
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        found.add(origin)
    return found


def test_run_client_signatures_name_only_public_types():
    public = {getattr(agentrun, name) for name in agentrun.__all__}
    public |= {getattr(agentrun.types, name) for name in agentrun.types.__all__}
    public.add(Client)  # Temporal's own client: a program may hand RunClient its connection
    private = []
    methods = [
        (name, member)
        for name, member in inspect.getmembers(RunClient)
        if not name.startswith("_") and callable(member)
    ]
    assert len(methods) >= len(set().union(*SERVED_BY.values()))
    for name, method in methods:
        for kind in set().union(*map(classes_in, typing.get_type_hints(method).values())):
            if kind not in public and kind.__module__ not in PLAIN_MODULES:
                private.append(f"RunClient.{name}: {kind.__module__}.{kind.__qualname__}")
    assert not private, "private types in RunClient's signatures:\n" + "\n".join(private)
    assert classes_in(collections.abc.AsyncIterator[agentrun.types.WatchItem]) == {
        collections.abc.AsyncIterator,
        agentrun.types.WatchItem,
    }


async def test_run_client_is_an_async_context_manager_over_real_postgres(settings: Settings):
    """`async with` opens what an operation needs and closes it on the way out; a read of
    the mirror needs no Temporal connection."""
    async with RunClient.lazy(settings) as runs:
        assert await runs.migrate() >= 1  # a pool of its own, closed at once
        assert runs._pool is None
        assert isinstance(await runs.list_runs(limit=1), list)
        pool = runs._pool
        assert pool is not None and not pool.closed
        assert runs._client is None, "no Temporal connection was needed"
    assert pool.closed
