"""How a tool call reads to a person: one line, from the tool's summary template and the
call's arguments ("Refund $19.99 on order 42"), or from an MCP tool's title.

A template is `str.format` over the arguments by name, with one format of its own:
`{cents:money}` reads an amount in cents as dollars (`$19.99`). A template that does not fit
the arguments (a name missing, a format the value refuses) gives no summary rather than a
wrong one: the inbox then shows the tool and its arguments as they are.
"""

from __future__ import annotations

import json
import string
from typing import Any

from agentledger.core.spec import JsonDict

# What a summary is cut to: a line, not a document.
SUMMARY_CHARS = 300


class _SummaryFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "money":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"money takes an amount in cents, not {value!r}")
            return f"{'-' if value < 0 else ''}${abs(value) / 100:,.2f}"
        return str(super().format_field(value, format_spec))

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        # Arguments by name alone: no attribute or index lookups into what the model sent.
        if not field_name.isidentifier():
            raise KeyError(field_name)
        return super().get_field(field_name, args, kwargs)


_FORMATTER = _SummaryFormatter()


def check_template(template: str) -> None:
    """ValueError for a template that names a field other than by plain name."""
    for _, field, _, _ in _FORMATTER.parse(template):
        if field is not None and not field.isidentifier():
            raise ValueError(
                f"summary {template!r}: {{{field}}} is not an argument's name; write "
                "{name} or {name:money}"
            )


def summarize(template: str, arguments: JsonDict) -> str | None:
    """The call in the template's words; None when the template does not fit it."""
    try:
        text = _FORMATTER.vformat(template, (), arguments)
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    return _cut(text)


def titled(title: str, arguments: JsonDict) -> str:
    """An MCP tool's call: its title and its arguments, as they are."""
    shown = ", ".join(f"{name} {json.dumps(value)}" for name, value in arguments.items())
    return _cut(f"{title}: {shown}" if shown else title)


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"
