"""The tree reads as layers, each importing only downward (docs/architecture.md).

A module's folder says what it may import: the pure core nothing of ours, the stores only
the core, and so on up to the worker and the CLI. An upward import fails here, naming the
file and the import, before it can tie two layers into one.
"""

from __future__ import annotations

import ast
from pathlib import Path

from agentledger.workflows.engine import SANDBOX_PASSTHROUGH
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
CORE, STORE, TEMPORAL, TOOLS = (
    "agentledger.core",
    "agentledger.store",
    "agentledger.temporal",
    "agentledger.tools",
)
ACTIVITIES, WORKFLOWS = "agentledger.activities", "agentledger.workflows"
CLIENT, WORKER, CLI, DEV = (
    "agentledger.client",
    "agentledger.worker",
    "agentledger.cli",
    "agentledger.dev",
)
DEMO = "agentledger.demo"
HTTP = "agentledger.http"
# The agent profiles the client takes (public, over the core alone).
PROFILES = "agentledger.profiles"
# This deployment's own code, beside the package (the design card's top level).
OWN_WORKFLOWS, OWN_ACTIVITIES = "workflows", "activities"

# Each layer and the layers below it that it may import (besides itself).
MAY_IMPORT = {
    CORE: set(),
    STORE: {CORE},
    TEMPORAL: {CORE},
    DEV: {CORE},
    TOOLS: {CORE, STORE},
    ACTIVITIES: {CORE, STORE, TOOLS},
    WORKFLOWS: {CORE, ACTIVITIES},
    PROFILES: {CORE, TOOLS},
    # The client side: one class per feature on one Scope; the tools only to install their
    # tables (`migrate`), the activities only for an eval's LLM judges (the workers' model
    # clients). Never the worker: a client replays and deploys with the workflows alone.
    CLIENT: {CORE, STORE, TEMPORAL, TOOLS, ACTIVITIES, WORKFLOWS, PROFILES},
    # The demo is an example of the public API: tools and a profile, nothing of the engine.
    DEMO: {CORE, TOOLS, PROFILES, "agentledger"},
    # The worker beside the client, not over it: it serves runs, it does not act on them.
    WORKER: {CORE, STORE, TEMPORAL, TOOLS, ACTIVITIES, WORKFLOWS},
    # The public API (agentledger/__init__.py and the modules beside it): over the engine.
    "agentledger": {CORE, STORE, TEMPORAL, TOOLS, CLIENT, PROFILES, WORKER, ACTIVITIES}
    | {WORKFLOWS},
    # The CLI is a thin face over RunClient: never the stores or Temporal underneath it
    # (tests/test_cli_front_door.py).
    CLI: {CORE, TOOLS, WORKER, DEV, DEMO, HTTP, PROFILES, CLIENT, "agentledger"},
    # The HTTP server stands beside the CLI, a face over the client in the same way.
    HTTP: {CORE, PROFILES, CLIENT, "agentledger"},
    # A deployment's own workflows and activities use agentledger's public API only (for
    # workflows, `agentledger.workflows.run_agent` too).
    OWN_ACTIVITIES: {"agentledger"},
    OWN_WORKFLOWS: {"agentledger", WORKFLOWS, OWN_ACTIVITIES},
}
LAYERS = {CORE, STORE, TEMPORAL, TOOLS, ACTIVITIES, WORKFLOWS, CLIENT, WORKER, CLI, DEV, DEMO}
LAYERS |= {HTTP, PROFILES}


def layer(module: str) -> str:
    if module == "agentledger.__main__":
        return CLI
    parts = module.split(".")
    if module == PROFILES:
        return PROFILES
    if parts[0] == "agentledger" and len(parts) > 1 and f"agentledger.{parts[1]}" in LAYERS:
        return f"agentledger.{parts[1]}"
    return parts[0]


def imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(parse_python(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "agentledger":
                found += [f"agentledger.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [m for m in found if m.split(".")[0] in ("agentledger", "workflows", "activities")]


def test_every_layer_imports_only_downward():
    files = [
        *ROOT.glob("agentledger/**/*.py"),
        *ROOT.glob("workflows/*.py"),
        *ROOT.glob("activities/*.py"),
    ]
    upward = []
    for path in files:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        home = layer(module)
        assert home in MAY_IMPORT, f"{path}: which layer is {home}? add it to MAY_IMPORT"
        for target in imports(path):
            if layer(target) != home and layer(target) not in MAY_IMPORT[home]:
                upward.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_no_client_side_module_imports_the_worker():
    """The client, the HTTP server and RunClient act on runs with the workflows alone: a
    client that imported the worker would load (and could start) a worker's machinery."""
    reaching = [
        f"{path.relative_to(ROOT)} imports {target}"
        for folder in ("agentledger/client", "agentledger/http")
        for path in ROOT.glob(f"{folder}/*.py")
        for target in imports(path)
        if layer(target) == WORKER
    ]
    assert not reaching, "\n".join(reaching)
    assert WORKER not in MAY_IMPORT[CLIENT] | MAY_IMPORT[HTTP]


def test_the_allowed_imports_have_no_cycle():
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"cycle: {' -> '.join((*path, node))}"
        if node in done:
            return
        for below in MAY_IMPORT[node]:
            visit(below, (*path, node))
        done.add(node)

    for node in MAY_IMPORT:
        visit(node, ())


def test_the_sandbox_passes_through_only_the_pure_core():
    ours = [
        m
        for m in SANDBOX_PASSTHROUGH
        if layer(m) in (*LAYERS, "agentledger", OWN_WORKFLOWS, OWN_ACTIVITIES)
    ]
    assert ours == [CORE]


def test_the_architecture_map_names_every_module_of_the_layers():
    """docs/architecture.md matches the tree: a module it does not name is a module a
    newcomer cannot place."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    folders = ["agentledger/core", "agentledger/store", "agentledger/tools", "agentledger/temporal"]
    folders += ["agentledger/client", "agentledger/worker", "agentledger/cli", "agentledger/dev"]
    folders += [
        "agentledger/activities",
        "agentledger/workflows",
        "agentledger/demo",
        "agentledger/http",
    ]
    folders += ["activities", "workflows"]
    missing = [
        f"{folder}/{path.name}"
        for folder in folders
        for path in sorted((ROOT / folder).glob("*.py"))
        if path.name != "__init__.py" and path.name not in text
    ]
    assert not missing, f"add them to docs/architecture.md: {missing}"
