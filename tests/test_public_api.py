"""The public API is what `agentledger` and `agentledger.types` export, and nothing else leaks out.

A user writes against those names (README "Your agent in five minutes"); everything else may
change. So RunClient's signatures and the public models hold only public types, nothing
public is defined in a private module (`agentledger/core/wire.py`, `_state.py`), a person's
`RunSpec` cannot carry what only the engine sets, every error agentledger raises to a person
has the one exported base, and the user-facing docs name only public names.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from temporalio.client import Client

import agentledger
import agentledger.types
from agentledger.core import errors
from agentledger.core._state import RunInput
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.results import ForkOrigin
from agentledger.core.spec import ENGINE_ONLY, RunSpec
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
PUBLIC: dict[str, object] = {
    **{name: getattr(agentledger, name) for name in agentledger.__all__},
    **{name: getattr(agentledger.types, name) for name in agentledger.types.__all__},
}
PUBLIC_OBJECTS = {id(obj) for obj in PUBLIC.values()}
# The Temporal client RunClient is made with and hands back, for what agentledger does not wrap.
FOREIGN = {Client}
# What only the engine sets on a run's input (agentledger/core/_state.py), in the order the
# workflow's input has always had them.
ENGINE_FIELDS = [
    "carry",
    "admission",
    "fork",
    "workflow_generation",
    "fairness_weight",
    "parent_run_id",
    "subagent_depth",
    "charged_to",
    "trigger",
    "requester",
    "tenant_policy",
    "model_calls_rated",
]


def is_public(kind: object) -> bool:
    if id(kind) in PUBLIC_OBJECTS or kind in FOREIGN or kind is type(None):
        return True
    module = getattr(kind, "__module__", "")
    return module.split(".")[0] in sys.stdlib_module_names | {"builtins"}


def leaves(annotation: object) -> list[object]:
    """The classes an annotation names, through unions, generics and Callable."""
    if annotation in (Any, typing.Self, Ellipsis):
        return []
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return []
    if origin is not None or isinstance(annotation, types.UnionType):
        found = [] if origin in (typing.Union, types.UnionType, None) else [origin]
        for arg in args:
            found += leaves(list(arg) if isinstance(arg, list) else arg)
        return found
    if isinstance(annotation, list):  # Callable's parameters
        return [leaf for arg in annotation for leaf in leaves(arg)]
    return [annotation]


def services() -> dict[str, type]:
    """RunClient's services (`client.runs`, `client.backlogs`, ...), by attribute."""
    client = agentledger.RunClient(None, AgentLedgerConfig.read({}))
    return {
        name: type(value)
        for name, value in vars(client).items()
        if not name.startswith("_")
        and type(value).__module__.startswith("agentledger.client.")
        and name != "scope"
    }


def public_methods() -> dict[str, Any]:
    """Every public method of RunClient and of each of its services ("runs.start")."""
    found = {}
    owners: list[tuple[str, type]] = [("", agentledger.RunClient)]
    owners += [(f"{name}.", kind) for name, kind in services().items()]
    for prefix, owner in owners:
        for name, member in inspect.getmembers(owner):
            own_dunder = not prefix and name in ("__init__", "__aenter__", "__aexit__")
            if name.startswith("_") and not own_dunder:  # a service is made by RunClient
                continue
            function = member.fget if isinstance(member, property) else member
            if callable(function) and not isinstance(function, type):
                found[f"{prefix}{name}"] = function
    return found


def test_run_client_groups_its_operations_into_services():
    """The operations are grouped as the command groups them; no operation has two names
    (the client's own methods are its connections, not operations of a service)."""
    grouped = services()
    assert set(grouped) >= {"runs", "sessions", "backlogs", "tenants", "approvers", "deploys"}
    own = {name for name in public_methods() if "." not in name}
    for name, kind in grouped.items():
        twice = own & {m for m in dir(kind) if not m.startswith("_")}
        assert not twice, f"RunClient and client.{name} both offer {twice}"


def test_run_client_signatures_use_only_public_types():
    methods = public_methods()
    assert {"runs.start", "runs.status", "runs.approve", "runs.watch", "runs.fork"} <= set(methods)
    private = [
        f"RunClient.{name}({param}): {kind!r}"
        for name, function in methods.items()
        for param, annotation in typing.get_type_hints(function).items()
        for kind in leaves(annotation)
        if not is_public(kind)
    ]
    assert not private, f"export these from agentledger.types, or take a public type: {private}"


def test_run_client_answers_are_typed():
    """Every public method returns a model, a primitive or None, never a bare dict (nor a
    list or iterator of them): the answer's fields are named and documented."""

    def dicts(annotation: object) -> bool:  # a dict (JsonDict too) anywhere in the answer
        return (typing.get_origin(annotation) or annotation) is dict or any(
            dicts(arg) for arg in typing.get_args(annotation)
        )

    loose = [
        f"RunClient.{name} -> {hints['return']!r}"
        for name, function in public_methods().items()
        if "return" in (hints := typing.get_type_hints(function)) and dicts(hints["return"])
    ]
    assert not loose, f"return a model from agentledger.types: {loose}"


def test_importing_the_types_loads_only_the_core():
    """`import agentledger.types` (a user's models, an HTTP server's schemas) loads no
    operations, stores or workflows: checked in a fresh interpreter."""
    heavy = (
        "agentledger.workflows",
        "agentledger.client",
        "agentledger.store",
        "agentledger.activities",
    )
    probe = (
        "import sys, agentledger.types; "
        f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def annotations_of(kind: type) -> list[object]:
    if issubclass(kind, BaseModel):
        return [field.annotation for field in kind.model_fields.values()]
    if dataclasses.is_dataclass(kind):
        return list(typing.get_type_hints(kind).values())
    return []


def test_public_models_hold_only_public_types():
    """What a public type holds, a user reads: so it is public too (nested models, enums)."""
    private = []
    for name, obj in PUBLIC.items():
        if not isinstance(obj, type):
            continue
        for annotation in annotations_of(obj):
            for kind in leaves(annotation):
                if (
                    isinstance(kind, type)
                    and kind.__module__.startswith("agentledger")
                    and (issubclass(kind, BaseModel | Enum) or dataclasses.is_dataclass(kind))
                    and id(kind) not in PUBLIC_OBJECTS
                ):
                    private.append(f"{name} holds {kind.__module__}.{kind.__name__}")
    assert not private, private


def test_nothing_public_lives_in_a_private_module():
    for name, obj in PUBLIC.items():
        module = getattr(obj, "__module__", None) or ""
        hidden = [part for part in module.split(".") if part.startswith("_")]
        assert not hidden, f"{name} is defined in the private module {module}"
    for module in ("agentledger.core.wire", "agentledger.core._state"):
        defined = {
            node.name
            for node in parse_python(
                Path(importlib.import_module(module).__file__).read_text()
            ).body
            if isinstance(node, ast.ClassDef)
        }
        assert defined and not defined & set(PUBLIC), f"{module} defines public names"


def test_a_run_spec_has_no_engine_fields_and_refuses_them():
    assert [n for n in RunInput.model_fields if n not in RunSpec.model_fields] == ENGINE_FIELDS
    assert list(ENGINE_ONLY) == ENGINE_FIELDS
    # A spec dumped before the engine's fields left it holds them unset: it still loads.
    assert RunSpec.model_validate({"task": "t", **dict.fromkeys(ENGINE_FIELDS)}) == RunSpec(
        task="t"
    )
    forged = {
        "carry": {"started_at": "2026-01-01T00:00:00Z"},
        "admission": "admission-default",
        "fork": {"parent_run_id": "run-x", "from_step": 1},
        "workflow_generation": 4,
        "fairness_weight": 100.0,
    }
    for field, value in forged.items():
        with pytest.raises(ValidationError, match=rf"{field}\n  Extra inputs are not permitted"):
            RunSpec.model_validate({"task": "t", field: value})
        with pytest.raises(ValidationError, match=field):
            agentledger.Agent(name="a", instructions="i").spec("t", **{field: value})


async def test_the_front_door_refuses_a_forged_engine_field_before_connecting():
    runs = agentledger.RunClient(None, AgentLedgerConfig.read({})).runs
    with pytest.raises(ValidationError, match="fairness_weight"):
        await runs.start("t", fairness_weight=100.0)
    with pytest.raises(ValidationError, match="fork"):
        await runs.start("t", fork={"parent_run_id": "run-x", "from_step": 1})


def test_the_command_refuses_a_spec_naming_an_engine_field(tmp_path):
    spec = tmp_path / "forged.yaml"
    spec.write_text("task: t\nadmission: admission-acme\n")
    env = {**os.environ, "AGENTLEDGER_HOME": str(tmp_path), "TEMPORAL_ADDRESS": "127.0.0.1:9"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "agentledger", "start", "--spec", str(spec), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done
    error = json.loads(done.stderr)["error"]
    assert error["message"] == "invalid run spec: admission: Extra inputs are not permitted"


def test_the_engine_input_keeps_the_workflow_input_shape():
    """Recorded histories hold the spec's fields, then the engine's: the same JSON as ever."""
    spec = RunSpec(task="t", tenant="acme", idempotency_key="k")
    run = RunInput.of(spec, fork=ForkOrigin(parent_run_id="run-p", from_step=2))
    assert list(run.model_dump(mode="json")) == [*RunSpec.model_fields, *ENGINE_FIELDS]
    assert run.spec() == spec
    assert RunInput.of(run, workflow_generation=4).fork == run.fork, "kept what was set"


def test_errors_share_one_exported_base():
    base = agentledger.AgentLedgerError
    public = [
        agentledger.InvalidInput,
        agentledger.NotFound,
        agentledger.Unreachable,
        agentledger.Refused,
    ]
    assert all(issubclass(kind, base) for kind in public)
    assert sorted(kind.exit_code for kind in public) == [2, 3, 4, 5]
    # SecretUnavailable is raised and caught inside a tool activity, never to a person.
    loose = [
        name
        for name, kind in vars(errors).items()
        if isinstance(kind, type)
        and issubclass(kind, Exception)
        and kind.__module__ == errors.__name__
        and not issubclass(kind, base)
        and name != "SecretUnavailable"
    ]
    assert not loose, f"{loose} raise to people without the AgentLedgerError base"


# ---------------------------------------------------------------- the docs


# For contributors: each says at its top that it describes internals, and may name them.
INTERNAL_DOCS = {
    "architecture.md",
    "benchmarks.md",
    "chaos.md",
    "decisions.md",
    "developing.md",
    "promises.md",
}
INTERNAL_NOTE = "describes agentledger's internals"
# Public modules beyond the two that export types: workflow code's `run_agent`, and the
# demo's tools and agents, which a worker loads by name (`--tools agentledger.demo:tools`).
PUBLIC_MODULES = {
    "agentledger.workflows": {"run_agent"},
    "agentledger.demo": None,
    "agentledger.webhooks": None,
}
# Names shaped like ours that are not Python: a container label (docs/your-agent.md).
NOT_PYTHON = {"agentledger.worker"}
DOTTED = re.compile(r"(?<![\w.])(?<!-m )(?<!INFO )(?<!WARNING )(agentledger(?:\.[A-Za-z_]\w*)+)")


def user_docs() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [page for page in pages if page.name not in INTERNAL_DOCS]


def resolves(dotted: str) -> bool:
    """Whether a dotted name is a Python module or attribute of ours (a span attribute or a
    label shaped like one is not)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def is_public_name(dotted: str) -> bool:
    parts = dotted.split(".")
    if len(parts) >= 2 and parts[1] in [*agentledger.__all__, "__all__"]:
        return True
    if parts[:2] == ["agentledger", "types"]:
        return len(parts) == 2 or parts[2] in agentledger.types.__all__
    for module, names in PUBLIC_MODULES.items():
        if dotted == module or (dotted.startswith(module + ".") and names is None):
            return True
        if names is not None and dotted.startswith(module + "."):
            return parts[len(module.split("."))] in names
    return False


def private_class_names() -> set[str]:
    """Every class agentledger defines under a name no public name shares."""
    found = set()
    for path in (ROOT / "agentledger").rglob("*.py"):
        found |= {
            node.name
            for node in parse_python(path.read_text()).body
            if isinstance(node, ast.ClassDef)
        }
    return found - set(PUBLIC) - set(dir(builtins))


def test_internal_docs_say_so():
    for name in INTERNAL_DOCS:
        top = (ROOT / "docs" / name).read_text()[:600]
        assert INTERNAL_NOTE in " ".join(top.split()), f"docs/{name}: say it is for contributors"


def test_user_docs_name_only_public_names():
    private_classes = private_class_names()
    found = []
    for page in user_docs():
        text = page.read_text()
        for dotted in DOTTED.findall(text):
            dotted = dotted.rstrip(".")
            if dotted not in NOT_PYTHON and resolves(dotted) and not is_public_name(dotted):
                found.append(f"{page.name}: {dotted}")
        for code in re.findall(r"`([^`\n]+)`", text):
            for word in re.findall(r"(?<![\w.-])([A-Z][A-Za-z0-9]+)(?![\w-])", code):
                if word in private_classes:
                    found.append(f"{page.name}: `{code}` names {word}")
    assert not found, f"these docs name private parts of agentledger: {found}"
