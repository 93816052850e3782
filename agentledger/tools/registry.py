"""A tool is a Python callable with a pydantic argument model, a side-effect flag and a risk.

The registry lives in the worker: the workflow only sees tool names and the registry's
verdict on a proposed call, so tools can change without touching workflow code.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection
from pydantic import BaseModel, ValidationError

from agentledger.core import action_summary
from agentledger.core.spec import JsonDict, RiskLevel
from agentledger.store.vault import SecretScope

CheckpointSaver = Callable[[JsonDict], Awaitable[None]]


@dataclass
class ToolContext:
    """What a tool may use: its run and step, its idempotency key, and durable progress.

    For a transactional tool `conn` is an open transaction: an effect written through it
    commits with the idempotency ledger entry, so it cannot happen twice. For any other
    tool it is an ordinary autocommit connection.

    `secret(value)` marks a value secret and returns the marker that stands for it: return
    the marker (or the value: it is replaced wherever it appears) and only the marker reaches
    the model, history, the mirror, the ledger and logs.
    """

    run_id: str
    step_id: str
    idempotency_key: str
    checkpoint: JsonDict
    conn: AsyncConnection[Any]
    save_checkpoint: CheckpointSaver
    heartbeat: Callable[..., None] = field(default=lambda *details: None)
    secrets: SecretScope = field(default_factory=SecretScope)

    def secret(self, value: str) -> str:
        return self.secrets.mark(value)


ToolFn = Callable[[Any, ToolContext], Awaitable[Any]]


@dataclass(frozen=True)
class Reconciled:
    """A reconcile hook's verdict on an unknown outcome: did the effect happen?"""

    happened: bool
    result: Any = None
    by: str = "reconcile hook"


ReconcileFn = Callable[[Any, ToolContext], Awaitable[Reconciled]]
# A tool's own checks on the final answer of a run that used it: (name, passed, detail).
AnswerCheck = Callable[[str], list[tuple[str, bool, str]]]


@dataclass(frozen=True)
class Tool:
    """A callable the model may ask for.

    `transactional` tools write their effect through `ctx.conn`, inside the ledger's
    transaction, so effect and record commit together. Other side-effecting tools act on
    the outside world; after a crash their outcome is unknown, and `reconcile`, given the
    same idempotency key, tells whether the effect happened. Without a hook, a person does.
    `answer_checks` verify the final answer of any run that used the tool.
    `secret_args` name arguments that carry secrets: a raw value the model writes there is
    sealed before it enters history, and a secret's marker there is opened for the tool (and
    only there). `secret_results` name fields of the tool's result to mark secret.
    `schema` holds the DDL of the tables the tool writes, idempotent (`IF NOT EXISTS`): every
    worker that has the tool applies it when it starts, so a tool set brings its own tables.
    `input_schema` is the JSON schema the model sees, when it is not `args_model`'s own (an
    MCP server's tool declares one).
    `summary` is how a call reads to the person asked to approve it, a template over its
    arguments ("Refund {cents:money} on order {order_id}"); `title` an MCP tool's title,
    which reads with the arguments when there is no template.
    `local`: a call of a tool with no side effect and low risk may run as a local activity,
    in the run's workflow task (what a new run does by default). False for a tool that may
    take seconds: while a local activity runs, the run takes in no message, query or cancel
    until its workflow task's heartbeat (about 8 s of the 10 s task timeout), and it has no
    heartbeat of its own.
    """

    name: str
    description: str
    args_model: type[BaseModel]
    fn: ToolFn
    side_effect: bool = False
    risk: RiskLevel = RiskLevel.LOW
    transactional: bool = True
    reconcile: ReconcileFn | None = None
    answer_checks: AnswerCheck | None = None
    secret_args: tuple[str, ...] = ()
    secret_results: tuple[str, ...] = ()
    schema: tuple[str, ...] = ()
    input_schema: JsonDict | None = None
    summary: str | None = None
    title: str | None = None
    local: bool = True

    @functools.cached_property
    def parameters(self) -> JsonDict:
        """The JSON schema of the arguments, built once: pydantic builds it anew on every
        call, and every model call sends it and checks each proposed call against it."""
        return self.input_schema or self.args_model.model_json_schema()

    def openai_schema(self) -> JsonDict:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def summarize(self, arguments: JsonDict) -> str | None:
        """The call in words for a person, if the tool says how it reads."""
        if self.summary is not None:
            return action_summary.summarize(self.summary, arguments)
        if self.title is not None:
            return action_summary.titled(self.title, arguments)
        return None

    def parse_arguments(self, arguments: JsonDict) -> BaseModel:
        return self.args_model.model_validate(arguments)


class UnknownToolError(LookupError):
    pass


class MalformedCall(ValueError):
    """The model's tool call does not parse: a malformed output, not a validation error."""


class ToolError(Exception):
    """Raised by a tool for a failure the model should hear about, not a retry."""


class ToolForbidden(ToolError):
    """Raised by a tool that lacks permission: the run pauses for an admin, no retry."""


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(
                f"unknown tool {name!r}; known tools: {', '.join(sorted(self._tools))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._tools)

    def tools(self) -> list[Tool]:
        return [self._tools[n] for n in self.names()]

    def schema(self) -> list[str]:
        """The DDL every tool here needs, each statement once, in the order tools name it."""
        return list(dict.fromkeys(sql for tool in self._tools.values() for sql in tool.schema))

    def allowed(self, allowed: list[str] | None) -> list[Tool]:
        names = self.names() if allowed is None else allowed
        return [self._tools[n] for n in names if n in self._tools]

    def check_call(
        self, name: str, raw_arguments: str, allowed: list[str] | None
    ) -> tuple[JsonDict | None, str | None]:
        """Validate a model's proposed call: (arguments, None) or (maybe-args, error).

        Raises UnknownToolError for a tool the run may not use, MalformedCall for
        arguments that are not a JSON object.
        """
        if allowed is not None and name not in allowed:
            raise UnknownToolError(f"tool {name!r} is not allowed in this run; allowed: {allowed}")
        tool = self.get(name)
        try:
            arguments = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as err:
            raise MalformedCall(f"arguments for {name!r} are not valid JSON: {err}") from err
        if not isinstance(arguments, dict):
            raise MalformedCall(f"arguments for {name!r} must be a JSON object")
        try:
            tool.parse_arguments(arguments)
        except ValidationError as err:
            return arguments, f"arguments for {name!r} failed validation: {compact_errors(err)}"
        return arguments, None


def compact_errors(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in err.errors()
    )
