"""The rules of tenancy are written once, on the client side, in `agentledger/client/scope.py`:
no other module of the client or of its faces (the CLI, the HTTP server, the public API)
compares a tenant with another or with none, tests whether there is one, or picks one over
another. They hand the scope's tenant down (a store filters by it) and show it; the scope
decides. And every public method of every client class answers a model, never a bare dict.

(The workflows judge their own messages by the tenant the client sent, on the worker side,
and the credential names the caller's tenant in the HTTP server's `Caller`: neither is a
scope's decision.)
"""

from __future__ import annotations

import ast
import importlib
import inspect
import typing
from pathlib import Path

from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
SCOPE = ROOT / "agentledger" / "client" / "scope.py"
CLIENT_SIDE = [
    *sorted((ROOT / "agentledger" / "client").glob("*.py")),
    *sorted((ROOT / "agentledger" / "cli").glob("*.py")),
    *sorted((ROOT / "agentledger" / "http").glob("*.py")),
    *sorted((ROOT / "agentledger").glob("*.py")),
]


def names_a_tenant(node: ast.AST) -> bool:
    """An expression that is a tenant: `tenant`, `acting_tenant`, `x.tenant`, `row["tenant"]`,
    `attributes.get(TENANT)`."""
    if isinstance(node, ast.Name):
        return node.id == "tenant" or node.id.endswith("_tenant")
    if isinstance(node, ast.Attribute):
        return node.attr == "tenant" or node.attr.endswith("_tenant")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "tenant"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return node.func.attr == "get" and (
            (isinstance(first, ast.Constant) and first.value == "tenant")
            or (isinstance(first, ast.Attribute) and first.attr == "TENANT")
            or (isinstance(first, ast.Name) and first.id == "TENANT")
        )
    return False


def tenancy_decided(source: str) -> list[tuple[int, str]]:
    """Where the code decides something by a tenant: (line, what)."""
    found = []
    for node in ast.walk(parse_python(source)):
        if isinstance(node, ast.Compare) and any(
            names_a_tenant(side) for side in (node.left, *node.comparators)
        ):
            found.append((node.lineno, "compares a tenant"))
        elif isinstance(node, ast.BoolOp) and any(names_a_tenant(v) for v in node.values):
            found.append((node.lineno, "picks a tenant (and/or)"))
        elif isinstance(node, ast.If | ast.While | ast.Assert):
            test = node.test
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test = test.operand
            if names_a_tenant(test):
                found.append((node.lineno, "tests for a tenant"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "model_copy"
            and any(
                isinstance(d, ast.Dict)
                and any(isinstance(k, ast.Constant) and k.value == "tenant" for k in d.keys)
                for d in ast.walk(node)
            )
        ):
            found.append((node.lineno, "sets a tenant"))
    return found


def test_only_the_scope_decides_by_a_tenant():
    assert tenancy_decided(SCOPE.read_text()), "the scope decides (the check can see it)"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in CLIENT_SIDE
        if path != SCOPE
        for line, what in tenancy_decided(path.read_text())
    ]
    assert not found, "decide it in agentledger/client/scope.py:\n" + "\n".join(found)


def test_the_check_sees_each_way_of_deciding_by_a_tenant():
    sneaky = """
if spec.tenant != acting_tenant: pass
owner = mirror_tenant or self.tenant
if not session.tenant: pass
rows = [r for r in rows if r["tenant"] == mine]
ok = attributes.get(TENANT) in allowed
spec = spec.model_copy(update={"tenant": "acme"})
print(f"tenant {run.tenant}")
store.tasks(agent, tenant=scope.tenant)
"""
    assert sorted(line for line, _ in tenancy_decided(sneaky)) == [2, 3, 4, 5, 6, 7]


def client_classes() -> list[type]:
    """Every public class the client's modules define that acts for a caller: built on a
    `Scope` (and the scope and RunClient themselves)."""
    found = []
    for path in sorted((ROOT / "agentledger" / "client").glob("*.py")):
        module = importlib.import_module(f"agentledger.client.{path.stem}")
        found += [
            kind
            for name, kind in vars(module).items()
            if inspect.isclass(kind)
            and kind.__module__ == module.__name__
            and not name.startswith("_")
            and (
                "scope" in inspect.signature(kind).parameters
                or kind.__name__ in ("Scope", "RunClient")
            )
        ]
    return found


def returns_a_dict(annotation: object) -> bool:
    return (typing.get_origin(annotation) or annotation) is dict or any(
        returns_a_dict(arg) for arg in typing.get_args(annotation)
    )


def test_no_client_method_answers_a_bare_dict():
    """A client class's public method answers a model (its fields named and documented), a
    primitive or None: never a dict, nor a list or iterator of them."""
    classes = client_classes()
    assert {"Runs", "Approvals", "Steering", "Sessions", "Backlogs", "Scope", "RunClient"} <= {
        kind.__name__ for kind in classes
    }
    loose = [
        f"{kind.__module__}.{kind.__name__}.{name} -> {hints['return']!r}"
        for kind in classes
        for name, member in vars(kind).items()
        if inspect.isfunction(member)
        and not name.startswith("_")
        and "return" in (hints := typing.get_type_hints(member))
        and returns_a_dict(hints["return"])
    ]
    assert not loose, "return a model from agentledger.types:\n" + "\n".join(loose)
