"""One copy of the workflow modules' code for every run a worker holds.

The workflow sandbox executes a workflow's module, and the modules of ours it imports, anew
for every run it starts or replays: each run gets module namespaces of its own, and the
sandbox sees (and restricts) every call that workflow code makes. Each of those imports
also read and unmarshalled the module's bytecode again (under PYTHONDONTWRITEBYTECODE,
compiled its source again) and kept its own copy of every code object: about 150 KB of a
cached run's 220 KB of module copies (`python -m bench.sandbox_memory`). Code objects are
immutable, so one per module serves every run: the finder below hands the import system a
loader that makes each module's code once per process. The modules are still executed anew
per run, in the sandbox, so nothing it checks changes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder, SourceFileLoader
from types import CodeType, ModuleType
from typing import ClassVar


class _SharedCodeLoader(SourceFileLoader):
    _codes: ClassVar[dict[str, CodeType]] = {}

    def get_code(self, fullname: str) -> CodeType:
        code = self._codes.get(self.path)
        if code is None:
            code = super().get_code(fullname)
            if code is None:  # a source loader always has code; this keeps mypy honest
                raise ImportError(f"no code for {fullname}", name=fullname)
            self._codes[self.path] = code
        return code


class _SharedCodeFinder(MetaPathFinder):
    """Finds the workflow packages' modules as usual, then loads them with shared code."""

    def __init__(self, packages: set[str]) -> None:
        self.packages = packages

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname.partition(".")[0] not in self.packages:
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and type(spec.loader) is SourceFileLoader and spec.origin:
            spec.loader = _SharedCodeLoader(fullname, spec.origin)
        return spec


def share_workflow_code(workflows: Iterable[type]) -> None:
    """Load the packages these workflow classes live in with one copy of their code each."""
    packages = {cls.__module__.partition(".")[0] for cls in workflows}
    for finder in sys.meta_path:
        if isinstance(finder, _SharedCodeFinder):
            finder.packages |= packages
            return
    sys.meta_path.insert(0, _SharedCodeFinder(packages))
