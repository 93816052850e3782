"""The deployment's own code (worker.py, starter.py, workflows/, activities/, and the app in
tests/plugin_app) is what a user copies: it imports only agentledger's public API,
never a private module such as `agentledger.worker.main` or an underscore name, so it keeps
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
    """Each dotted name of ours the code imports: `import agentledger.x` gives `agentledger.x`,
    `from agentledger.x import y` gives `agentledger.x.y`, and `agentledger.x.y` used as an
    attribute
    of an imported `agentledger` gives `agentledger.x.y`."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names.append(f"{node.value.id}.{node.attr}")
    return [name for name in names if name.split(".")[0] == "agentledger"]


def private_imports(source: str) -> list[str]:
    return [
        name
        for name in imported_names(parse_python(source))
        if name != "agentledger" and not is_public_name(name) and not _is_dunder(name)
    ]


def _is_dunder(name: str) -> bool:
    """`agentledger.__file__` and the like: Python's, not agentledger's API."""
    last = name.rsplit(".", 1)[-1]
    return last.startswith("__") and last.endswith("__")


def test_the_deployment_code_imports_only_public_names():
    found = {
        str(path.relative_to(ROOT)): names
        for path in DEPLOYMENT_CODE
        if (names := private_imports(path.read_text()))
    }
    assert not found, f"the deployment's code imports private parts of agentledger: {found}"


def test_the_scan_finds_a_private_import():
    """The scan itself, on the imports this repository's worker.py and starter.py had."""
    assert private_imports("from agentledger.worker.main import main\n") == [
        "agentledger.worker.main.main"
    ]
    assert private_imports("import agentledger.cli.main\n") == ["agentledger.cli.main"]
    assert private_imports("import agentledger\nagentledger._HOMES\n") == ["agentledger._HOMES"]
    assert private_imports("import agentledger\nagentledger.__file__\n") == []
    assert private_imports("from agentledger import RunSpec\nimport agentledger.workflows\n") == []
