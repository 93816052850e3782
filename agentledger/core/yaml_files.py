"""YAML read from a file, whose errors fit one line after the file's name (PyYAML's own name
`<unicode string>` and run over several lines, quoting the source)."""

from __future__ import annotations

from typing import Any

import yaml


class YamlFileError(yaml.YAMLError):  # type: ignore[misc]  # PyYAML is untyped here
    """Text that is not YAML: the line, the column and what is wrong there."""


def load_yaml(text: str) -> Any:
    """`text` (a file's) as YAML, safe types only; a syntax error is a YamlFileError whose
    message its reader puts after the file's name."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        context = f" ({err.context})" if err.context else ""
        raise YamlFileError(f"{where}{err.problem or 'not YAML'}{context}") from err
