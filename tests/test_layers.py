"""The tree reads as layers, each importing only downward (docs/architecture.md).

A module's folder says what it may import: the pure core nothing of ours, the stores only
the core, and so on up to the worker and the CLI. An upward import fails here, naming the
file and the import, before it can tie two layers into one.
"""

from __future__ import annotations

import ast
from pathlib import Path

from agentledger.worker.worker_factory import SANDBOX_PASSTHROUGH
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
CORE, STORE, TEMPORAL, TOOLS = (
    "agentledger.core",
    "agentledger.store",
    "agentledger.temporal",
    "agentledger.tools",
)
ACTIVITIES, WORKFLOWS = "agentledger.activities", "agentledger.workflows"
OPS, WORKER, CLI, DEV = (
    "agentledger.ops",
    "agentledger.worker",
    "agentledger.cli",
    "agentledger.dev",
)
DEMO = "agentledger.demo"
HTTP = "agentledger.http"
# RunClient's services (client operations, beside OPS), and the agent profiles they take
# (public, over the core alone).
SERVICES, PROFILES = "agentledger.services", "agentledger.profiles"
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
    OPS: {CORE, STORE, TEMPORAL, WORKFLOWS},
    PROFILES: {CORE, TOOLS},
    # The demo is an example of the public API: tools and a profile, nothing of the engine.
    DEMO: {CORE, TOOLS, PROFILES, "agentledger"},
    WORKER: {CORE, STORE, TEMPORAL, TOOLS, OPS, ACTIVITIES, WORKFLOWS},
    # The services take a profile and reach the worker's deploy checks only when asked; an
    # eval's LLM judges use the workers' model clients (services/eval_judges.py).
    SERVICES: {CORE, STORE, TEMPORAL, OPS, PROFILES, WORKER, ACTIVITIES},
    # The public API (agentledger/__init__.py and the modules beside it): over the engine.
    "agentledger": {CORE, STORE, TEMPORAL, TOOLS, OPS, SERVICES, PROFILES, WORKER, ACTIVITIES}
    | {WORKFLOWS},
    # The CLI is a thin layer over RunClient ("agentledger"): never the operations, the stores
    # or Temporal underneath it (tests/test_cli_front_door.py).
    CLI: {CORE, TOOLS, WORKER, DEV, DEMO, HTTP, PROFILES, "agentledger"},
    # The HTTP door stands beside the CLI, over RunClient in the same way.
    HTTP: {CORE, PROFILES, "agentledger"},
    # A deployment's own workflows and activities use agentledger's public API only (for
    # workflows, `agentledger.workflows.run_agent` too).
    OWN_ACTIVITIES: {"agentledger"},
    OWN_WORKFLOWS: {"agentledger", WORKFLOWS, OWN_ACTIVITIES},
}
LAYERS = {CORE, STORE, TEMPORAL, TOOLS, ACTIVITIES, WORKFLOWS, OPS, WORKER, CLI, DEV, DEMO, HTTP}
LAYERS |= {SERVICES, PROFILES}


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
    folders += ["agentledger/ops", "agentledger/worker", "agentledger/cli", "agentledger/dev"]
    folders += [
        "agentledger/activities",
        "agentledger/workflows",
        "agentledger/demo",
        "agentledger/http",
    ]
    folders += ["agentledger/services"]
    folders += ["activities", "workflows"]
    missing = [
        f"{folder}/{path.name}"
        for folder in folders
        for path in sorted((ROOT / folder).glob("*.py"))
        if path.name != "__init__.py" and path.name not in text
    ]
    assert not missing, f"add them to docs/architecture.md: {missing}"
