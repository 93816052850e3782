"""The deployment's own code (worker.py, starter.py, workflows/, activities/, and the app in
tests/plugin_app) is what a user copies: it imports only agentrun's public API (issue 37),
never a private module such as `agentrun.worker.main` or an underscore name, so it keeps
working when those change."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import parse_python
from tests.test_public_api import is_public_name

ROOT = Path(__file__).resolve().parent.parent
DEPLOYMENT_CODE = [
    ROOT / "worker.py",
    ROOT / "starter.py",
    *sorted((ROOT / "workflows").rglob("*.py")),
    *sorted((ROOT / "activities").rglob("*.py")),
    # The Temporal app of its own that adopts the plugin (tests/test_plugin_app.py, the wheel).
    *sorted((ROOT / "tests" / "plugin_app").rglob("*.py")),
]


def imported_names(tree: ast.Module) -> list[str]:
    """Each dotted name of ours the code imports: `import agentrun.x` gives `agentrun.x`,
    `from agentrun.x import y` gives `agentrun.x.y`, and `agentrun.x.y` used as an attribute
    of an imported `agentrun` gives `agentrun.x.y`."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names.append(f"{node.value.id}.{node.attr}")
    return [name for name in names if name.split(".")[0] == "agentrun"]


def private_imports(source: str) -> list[str]:
    return [
        name
        for name in imported_names(parse_python(source))
        if name != "agentrun" and not is_public_name(name) and not _is_dunder(name)
    ]


def _is_dunder(name: str) -> bool:
    """`agentrun.__file__` and the like: Python's, not agentrun's API."""
    last = name.rsplit(".", 1)[-1]
    return last.startswith("__") and last.endswith("__")


def test_the_deployment_code_imports_only_public_names():
    found = {
        str(path.relative_to(ROOT)): names
        for path in DEPLOYMENT_CODE
        if (names := private_imports(path.read_text()))
    }
    assert not found, f"the deployment's code imports private parts of agentrun: {found}"


def test_the_scan_finds_a_private_import():
    """The scan itself, on the imports this repository's worker.py and starter.py had."""
    assert private_imports("from agentrun.worker.main import main\n") == [
        "agentrun.worker.main.main"
    ]
    assert private_imports("import agentrun.cli.main\n") == ["agentrun.cli.main"]
    assert private_imports("import agentrun\nagentrun._HOMES\n") == ["agentrun._HOMES"]
    assert private_imports("import agentrun\nagentrun.__file__\n") == []
    assert private_imports("from agentrun import RunSpec\nimport agentrun.workflows\n") == []
