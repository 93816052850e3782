"""`@agentledger.tool`: turn `async def f(args: SomeModel, ctx) -> result` into a `Tool`.

The argument model comes from the first parameter's annotation and the description the model
reads from the docstring, so a tool is declared where it is written, with nothing to repeat.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel

from agentledger.core import action_summary
from agentledger.core.spec import RiskLevel
from agentledger.tools.registry import AnswerCheck, ReconcileFn, Tool, ToolFn

Risk = Literal["low", "medium", "high"] | RiskLevel


def tool(
    fn: ToolFn | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    risk: Risk = "low",
    side_effect: bool = False,
    transactional: bool = True,
    reconcile: ReconcileFn | None = None,
    secret_args: Iterable[str] = (),
    secret_results: Iterable[str] = (),
    answer_checks: AnswerCheck | None = None,
    schema: Iterable[str] = (),
    summary: str | None = None,
    local: bool = True,
) -> Any:
    """Declare a tool, as `@tool` or `@tool(...)`; every option is a `Tool` field
    (agentledger.tools.registry says what each one promises). `risk` at or above a run's
    approval threshold waits for a person; `side_effect` puts the call through the ledger;
    `summary` says how a call reads to that person: "Refund {cents:money} on order
    {order_id}" (agentledger.core.action_summary); `local=False` keeps a read-only tool that
    may take seconds an activity of its own."""
    if summary is not None:
        action_summary.check_template(summary)

    def declare(fn: ToolFn) -> Tool:
        return Tool(
            name=name or fn.__name__,
            description=description or _description(fn),
            args_model=_args_model(fn),
            fn=fn,
            side_effect=side_effect,
            risk=RiskLevel(risk),
            transactional=transactional,
            reconcile=reconcile,
            answer_checks=answer_checks,
            secret_args=tuple(secret_args),
            secret_results=tuple(secret_results),
            schema=tuple(schema),
            summary=summary,
            local=local,
        )

    return declare if fn is None else declare(fn)


def _description(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn)
    if not doc:
        raise TypeError(
            f"tool {fn.__name__!r} needs a docstring (or description=...): the model reads it "
            "to decide when to call the tool"
        )
    return doc


def _args_model(fn: Callable[..., Any]) -> type[BaseModel]:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"tool {fn.__name__!r} must be `async def f(args, ctx)`")
    params = list(inspect.signature(fn).parameters)
    hints = typing.get_type_hints(fn)
    model = hints.get(params[0]) if params else None
    if len(params) != 2 or not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(
            f"tool {fn.__name__!r} must take (args: SomePydanticModel, ctx: ToolContext); "
            "the model's fields are the arguments the model may pass"
        )
    return model
