"""The optional parts of agentledger (its extras), and the one command that installs each.

A command that needs an extra not installed names the command that installs it instead of a
traceback: `pip install -e '.[evals]'` in a checkout (the folder holds this very package's
pyproject.toml), `pip install 'agentledger[evals]'` otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentledger.core.errors import SetupError

# The import roots each extra brings (pyproject.toml's optional-dependencies).
EXTRA_OF_MODULE = {
    "pgserver": "local",
    "pydantic_evals": "evals",
    "starlette": "serve",
    "uvicorn": "serve",
    "sse_starlette": "serve",
    "jwt": "serve",
    "ag_ui": "serve",
    "docker": "sandbox",
    "opentelemetry": "otel",
}


class MissingExtra(SetupError):
    """A command needs an extra that is not installed; the message says how to install it."""


def checkout_root() -> Path | None:
    """The source checkout this package runs from (an editable install), if it does."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    try:
        named = 'name = "agentledger"' in pyproject.read_text()
    except OSError:
        return None
    return root if named else None


def install_command(extra: str) -> str:
    """The one command that installs `extra` where this package runs."""
    root = checkout_root()
    if root is None:
        return f"pip install 'agentledger[{extra}]'"
    here = "." if Path(os.getcwd()).resolve() == root else str(root)
    return f"pip install -e '{here}[{extra}]'"


def missing_extra(err: ImportError) -> MissingExtra | None:
    """What to install, when `err` is an extra's module missing; None for any other."""
    root = (err.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(root)
    if extra is None:
        return None
    return MissingExtra(
        f"this needs the `{extra}` extra ({root} is not installed): `{install_command(extra)}`"
    )
