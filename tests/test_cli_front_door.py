"""The CLI is a thin face over `agentledger.RunClient`.

Every command the parser offers is served by a method of one of RunClient's client classes
(`client.runs.start`, `client.backlogs.enqueue`, ...), grouped as the commands are; no CLI
module imports a client class but through RunClient, nor names one for a dynamic import;
every method the CLI calls on its client is one of those; and their signatures name only
public types, so what the CLI can do, a Python program can do with the same names.
"""

from __future__ import annotations

import argparse
import ast
import collections.abc
import inspect
import typing
from pathlib import Path

from temporalio.client import Client

import agentledger
import agentledger.types
from agentledger import RunClient
from agentledger.cli.main import COMMANDS, LOCAL, parser
from agentledger.core.config import AgentLedgerConfig
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
CLI_FILES = [
    *sorted((ROOT / "agentledger" / "cli").glob("*.py")),
    ROOT / "agentledger" / "__main__.py",
    ROOT / "starter.py",
]
OPERATIONS = "agentledger.client"
FRONT_DOOR = "agentledger.client.run_client"
# The names CLI code gives its RunClient.
CLIENT_NAMES = {"client", "stacked", "demo_runs"}
# RunClient's services, each named as the group of commands it serves.
SERVICES = {"runs", "sessions", "backlogs", "tenants", "approvers", "deploys", "mirror", "evals"}
SERVICES |= {"keys", "costs", "schedules", "hooks", "standing", "notifications"}

# Each command (a group's commands as "group command") and the RunClient methods it uses,
# a service's as "service.method".
SERVED_BY = {
    "start": {"runs.start"},
    "eval dataset": {"evals.dataset"},
    "eval run": {"evals.run"},
    "approve": {"runs.approve", "approvers.key"},
    "reject": {"runs.reject", "approvers.key"},
    "pause": {"runs.pause"},
    "resume": {"runs.resume"},
    "cancel": {"runs.cancel"},
    "say": {"runs.say"},
    "chat": {"sessions.chat", "runs.approve", "runs.reject", "sessions.end"},
    "end": {"sessions.end"},
    "status": {"runs.inspect"},
    "receipt": {"runs.receipt"},
    "mirror": {"mirror.check", "mirror.rebuild"},
    "watch": {"runs.watch"},
    "fork": {"runs.fork"},
    "deploy": {"deploys.make_current", "deploys.check", "deploys.patches", "deploys.status"},
    "version": {"runs.version"},
    "list": {"runs.recent", "runs.unmirrored"},
    "stats": {"mirror.stats"},
    "prune": {"mirror.prune"},
    "migrate": {"migrate"},
    "up": {"migrate"},
    "demo": {"runs.start", "runs.status", "runs.approve", "runs.result", "runs.receipt"},
    "backlog enqueue": {"backlogs.load_tasks", "backlogs.enqueue"},
    "backlog list": {"backlogs.tasks"},
    "backlog stop": {"backlogs.stop"},
    "backlog resume": {"backlogs.resume"},
    "backlog dead": {"backlogs.dead"},
    "backlog retry": {"backlogs.retry"},
    "tenants set": {"tenants.set", "tenants.set_policy", "tenants.set_budget", "tenants.budgets"},
    "tenants show": {"tenants.show"},
    "costs": {"costs.summary"},
    "schedule create": {"schedules.create"},
    "schedule list": {"schedules.listed"},
    "schedule show": {"schedules.show"},
    "schedule pause": {"schedules.pause"},
    "schedule resume": {"schedules.resume"},
    "schedule trigger": {"schedules.trigger"},
    "schedule backfill": {"schedules.backfill"},
    "schedule delete": {"schedules.delete"},
    "hooks create": {"hooks.create"},
    "hooks list": {"hooks.listed"},
    "hooks delete": {"hooks.delete"},
    "standing grant": {"standing.grant"},
    "standing list": {"standing.listed"},
    "standing revoke": {"standing.revoke"},
    "notifications add": {"notifications.subscribe"},
    "notifications list": {"notifications.listed"},
    "notifications remove": {"notifications.remove"},
    "notifications deliveries": {"notifications.deliveries"},
    "notifications redeliver": {"notifications.redeliver"},
    "tenants list": {"tenants.listed"},
    "approvers add": {"approvers.add", "approvers.config_dir"},
    "approvers list": {"approvers.listed"},
    "serve": {"keys.listed"},
    "keys create": {"keys.create"},
    "keys list": {"keys.listed"},
    "keys revoke": {"keys.revoke"},
}
# Modules whose types may appear in RunClient's signatures besides agentledger's public ones.
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
    """Where a file imports the client's classes past RunClient, or names them as a string
    (importlib, sys.modules): each as "file:line: module"."""
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
            if (module == OPERATIONS or module.startswith(f"{OPERATIONS}."))
            and not (module == FRONT_DOOR or module.startswith(f"{FRONT_DOOR}."))
        ]
    return found


def client_calls(path: Path) -> set[str]:
    """What CLI code reads off its RunClient: a service's methods as "service.method"
    (`client.runs.approve`: "runs.approve"), the client's own as their names."""
    found = set()
    for node in ast.walk(parse_python(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        inner = node.value
        if isinstance(inner, ast.Name) and inner.id in CLIENT_NAMES:
            if node.attr not in SERVICES:  # a service's methods are counted below
                found.add(node.attr)
        elif (
            isinstance(inner, ast.Attribute)
            and isinstance(inner.value, ast.Name)
            and inner.value.id in CLIENT_NAMES
            and inner.attr in SERVICES
        ):
            found.add(f"{inner.attr}.{node.attr}")
    return found


def reachable(client: RunClient, name: str) -> bool:
    """Whether `name` ("service.method", or the client's own) is on the client."""
    owner: object = client
    for part in name.split("."):
        if not hasattr(owner, part):
            return False
        owner = getattr(owner, part)
    return True


def test_no_cli_module_reaches_the_operations_layer_but_through_run_client():
    found = [hit for path in CLI_FILES for hit in operations_named(path)]
    assert not found, "the CLI calls the client's classes directly; go through RunClient:\n" + (
        "\n".join(found)
    )


def test_the_check_catches_an_import_of_the_client_classes(tmp_path):
    """The check above would see each way of reaching the client's classes."""
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "from agentledger.client import runs\n"
        "from agentledger import client\n"
        "import agentledger.client.watch\n"
        "from agentledger.client.run_client import RunClient\n"
        "import importlib\n"
        "fork = importlib.import_module('agentledger.client.forks')\n"
    )
    found = operations_named(sneaky)
    assert [hit.split(": ")[1] for hit in found] == [
        "agentledger.client",
        "agentledger.client.runs",
        "agentledger.client",
        "agentledger.client.watch",
        "agentledger.client.forks",
    ]


def test_every_command_is_served_by_a_run_client_method():
    # A local command (no stack: completion, settings, sandbox) may be a group of its own.
    offered = {c for c in commands(parser()) if c.split()[0] not in LOCAL} | set(LOCAL)
    assert offered == set(SERVED_BY) | set(LOCAL), (
        "a command without a RunClient method (add one, and list it in SERVED_BY): "
        f"{sorted(offered ^ (set(SERVED_BY) | set(LOCAL)))}"
    )
    assert {c.split()[0] for c in SERVED_BY} == set(COMMANDS)
    instance = RunClient(None, AgentLedgerConfig.model_construct())
    missing = {
        command: sorted(name for name in names if not reachable(instance, name))
        for command, names in SERVED_BY.items()
        if any(not reachable(instance, name) for name in names)
    }
    assert not missing, f"RunClient lacks: {missing}"


def test_the_cli_calls_only_run_client_methods():
    instance = RunClient(None, AgentLedgerConfig.model_construct())
    called = {name for path in CLI_FILES for name in client_calls(path)}
    assert called, "the CLI calls its RunClient somewhere"
    assert {name.split(".")[0] for name in called} & SERVICES == SERVICES, "every service"
    unknown = sorted(name for name in called if not reachable(instance, name))
    assert not unknown, f"not RunClient methods: {unknown}"
    used = set().union(*SERVED_BY.values())
    assert used <= called, f"listed but never called: {used - called}"


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
    public = {getattr(agentledger, name) for name in agentledger.__all__}
    public |= {getattr(agentledger.types, name) for name in agentledger.types.__all__}
    public.add(Client)  # Temporal's own client: a program may hand RunClient its connection
    private = []
    instance = RunClient(None, AgentLedgerConfig.model_construct())
    methods = [
        (f"{owner}{name}", member)
        for owner, kind in [("", RunClient)]
        + [(f"{service}.", type(getattr(instance, service))) for service in sorted(SERVICES)]
        for name, member in inspect.getmembers(kind)
        if not name.startswith("_") and callable(member)
    ]
    assert len(methods) >= len(set().union(*SERVED_BY.values()))
    for name, method in methods:
        for kind in set().union(*map(classes_in, typing.get_type_hints(method).values())):
            if kind not in public and kind.__module__ not in PLAIN_MODULES:
                private.append(f"RunClient.{name}: {kind.__module__}.{kind.__qualname__}")
    assert not private, "private types in RunClient's signatures:\n" + "\n".join(private)
    assert classes_in(collections.abc.AsyncIterator[agentledger.types.WatchItem]) == {
        collections.abc.AsyncIterator,
        agentledger.types.WatchItem,
    }


async def test_run_client_is_an_async_context_manager_over_real_postgres(
    settings: AgentLedgerConfig,
):
    """`async with` opens what an operation needs and closes it on the way out; a read of
    the mirror needs no Temporal connection."""
    async with RunClient.lazy(settings) as run_client:
        assert await run_client.migrate() >= 1  # a pool of its own, closed at once
        assert run_client._connections.pool is None
        assert isinstance(await run_client.runs.recent(limit=1), list)
        pool = run_client._connections.pool
        assert pool is not None and not pool.closed
        assert run_client._connections.client is None, "no Temporal connection was needed"
    assert pool.closed
