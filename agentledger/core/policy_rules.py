"""The operator's policy for a tenant, as data: approval rules on tools (with conditions on
their arguments), and what the tenant's callers may start. Public.

Rules are read by the run workflow on every tool call (pure and deterministic: no I/O, no
clock), so a condition is a small language of its own, never Python: comparisons of an
argument with a JSON literal, joined by `and`:

    cents > 5000
    to != "ana@example.com" and priority >= 2

A condition that cannot be decided (a missing argument compared for order, a number
compared with text) counts as met: a rule that asks for more approvals fails closed.
"""

from __future__ import annotations

import json
import operator
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

JsonDict = dict[str, Any]

Comparison = tuple[tuple[str, ...], str, Any]

_TERM = re.compile(
    r"\s*(?P<path>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*"
    r"(?P<op>>=|<=|==|!=|>|<)\s*"
    r'(?P<value>"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)\s*'
)
_AND = re.compile(r"and\b", re.IGNORECASE)
ORDER = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
CONDITION_HELP = (
    'comparisons of an argument with a JSON literal joined by "and", such as '
    '`cents > 5000` or `to != "ana@example.com" and priority >= 2`'
)


def parse_condition(text: str) -> list[Comparison]:
    """The comparisons a condition holds; ValueError naming where it stops making sense."""
    found: list[Comparison] = []
    at = 0
    while True:
        term = _TERM.match(text, at)
        if term is None:
            raise ValueError(
                f"cannot read {text[at:]!r} in condition {text!r}: write {CONDITION_HELP}"
            )
        found.append((tuple(term["path"].split(".")), term["op"], json.loads(term["value"])))
        at = term.end()
        if at == len(text):
            return found
        joined = _AND.match(text, at)
        if joined is None:
            raise ValueError(f"expected `and` at {text[at:]!r} in condition {text!r}")
        at = joined.end()


def _argument(arguments: JsonDict, path: tuple[str, ...]) -> Any:
    value: Any = arguments
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "text"
    return "null" if value is None else "other"


def _holds(value: Any, op: str, literal: Any) -> bool:
    same = _kind(value) == _kind(literal)
    if op == "==":
        return same and value == literal
    if op == "!=":
        return not (same and value == literal)
    if not same or _kind(value) not in ("number", "text"):
        return True  # undecidable: the rule applies
    return bool(ORDER[op](value, literal))


def condition_met(text: str, arguments: JsonDict) -> bool:
    return all(
        _holds(_argument(arguments, path), op, literal)
        for path, op, literal in parse_condition(text)
    )


def condition_proven(text: str, arguments: JsonDict) -> bool:
    """Every comparison decidable and true: what a condition must be to approve a call (a
    standing approval's), where `condition_met` is what it must be to ask for more."""
    for path, op, literal in parse_condition(text):
        value = _argument(arguments, path)
        comparable = _kind(value) == _kind(literal) and _kind(value) in ("number", "text")
        if (op not in ("==", "!=") and not comparable) or not _holds(value, op, literal):
            return False
    return True


def _readable(text: str) -> str:
    parse_condition(text)
    return text


# A condition, checked readable when it is read.
Condition = Annotated[
    str,
    Field(min_length=1, max_length=500, description=f"a condition: {CONDITION_HELP}"),
    AfterValidator(_readable),
]


class ApprovalRule(BaseModel):
    """Calls of `tool` (`*`: every tool), when `when` holds of their arguments, need
    `approvers` distinct people in `role` (None: the run's default role), or, with `deny`,
    never run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1, max_length=200, description="a tool's name; * for every tool")
    when: str | None = Field(
        None, min_length=1, max_length=500, description=f"a condition: {CONDITION_HELP}"
    )
    role: str | None = Field(
        None, min_length=1, max_length=100, description="the role each approver must have"
    )
    approvers: int = Field(1, ge=1, le=5, description="distinct approvers, each in the role")
    deny: bool = Field(False, description="the call never runs; the model hears it is denied")

    @field_validator("when")
    @classmethod
    def _readable(cls, value: str | None) -> str | None:
        if value is not None:
            parse_condition(value)
        return value

    def applies(self, tool: str, arguments: JsonDict) -> bool:
        if self.tool not in ("*", tool):
            return False
        return self.when is None or condition_met(self.when, arguments)

    def text(self) -> str:
        """The rule as `tenants set --rule` takes it."""
        parts = [self.tool]
        if self.when:
            parts.append(f"when {self.when}")
        if self.deny:
            return "deny " + " ".join(parts)
        if self.role:
            parts.append(f"by {self.role}")
        if self.approvers > 1:
            parts.append(f"x{self.approvers}")
        return " ".join(parts)


_RULE_TEXT = re.compile(
    r"\s*(?P<deny>deny\s+)?(?P<tool>[A-Za-z0-9_*.:-]+)"
    r"(?:\s+when\s+(?P<when>.+?))?(?:\s+by\s+(?P<role>[A-Za-z0-9_-]+))?"
    r"(?:\s+x(?P<approvers>\d))?\s*",
    re.IGNORECASE,
)
RULE_HELP = (
    "TOOL [when CONDITION] [by ROLE] [xN], or deny TOOL [when CONDITION], such as "
    "'refund_order when cents > 5000 by finance x2' (or the rule as a JSON object)"
)


def parse_rule(text: str) -> ApprovalRule:
    """A rule as people write it (`RULE_HELP`), or as a JSON object; ValueError if neither."""
    if text.lstrip().startswith("{"):
        return ApprovalRule.model_validate_json(text)
    found = _RULE_TEXT.fullmatch(text)
    if found is None or (found["deny"] and (found["role"] or found["approvers"])):
        raise ValueError(f"cannot read rule {text!r}: write {RULE_HELP}")
    return ApprovalRule(
        tool=found["tool"],
        when=found["when"],
        role=found["role"],
        approvers=int(found["approvers"] or 1),
        deny=bool(found["deny"]),
    )


FreeForm = Literal["runner", "admin"]


class TenantPolicy(BaseModel):
    """What an operator (or a tenant's admin) sets for all of a tenant's runs, whatever their
    spec: which agents its callers may run, who may send a spec of their own, and approval
    rules no spec can remove or weaken (agentledger.core.tenant_policy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: list[str] | None = Field(
        None, description="the agent profiles its callers may run; None: every one loaded"
    )
    default_agent: str | None = Field(
        None,
        description="what a start that names no agent runs; None: the only profile loaded, "
        "if there is one, else the start is a free-form spec",
    )
    free_form: FreeForm | None = Field(
        "admin",
        description="the least role that may start a run from a spec of its own (not an "
        "agent's profile): runner, admin; None: operators only",
    )
    rules: list[ApprovalRule] = Field(
        default_factory=list, description="approval rules every run of the tenant carries first"
    )
    requester_may_approve: bool = Field(
        False, description="whether whoever asked for a run may approve its calls"
    )
    two_person: bool = Field(
        False, description="every approval needs two distinct approvers in its role"
    )
    standing_tools: list[str] = Field(
        default_factory=list,
        description="the tools its approvers may grant standing approvals for (`*`: any); "
        "none: they may grant none",
    )
    standing_max_hours: float = Field(
        24.0, gt=0, le=24 * 90, description="the longest a standing approval may last"
    )
    always_ask: list[str] = Field(
        default_factory=list,
        description="tools whose every call asks a person: no standing approval covers them",
    )

    def may_grant(self, tool: str) -> bool:
        """Whether an approver may grant a standing approval for `tool`."""
        allowed = "*" in self.standing_tools or tool in self.standing_tools
        return allowed and tool not in self.always_ask

    def text(self) -> list[str]:
        """The policy, a line each, as `tenants show` prints it."""
        agents = ", ".join(self.agents) if self.agents is not None else "every profile loaded"
        lines = [
            f"agents: {agents}",
            f"default agent: {self.default_agent or 'the only profile loaded, if one'}",
            f"free-form specs: {self.free_form or 'operators only'}"
            + (" and up" if self.free_form == "runner" else ""),
            "a requester may approve their own run: "
            + ("yes" if self.requester_may_approve else "no"),
            f"two-person rule: {'on' if self.two_person else 'off'}",
        ]
        lines += [f"rule: {rule.text()}" for rule in self.rules] or ["rules: none"]
        lines.append(
            f"standing approvals: {', '.join(self.standing_tools)}, at most "
            f"{self.standing_max_hours:g}h"
            if self.standing_tools
            else "standing approvals: none may be granted"
        )
        if self.always_ask:
            lines.append(f"always ask: {', '.join(self.always_ask)}")
        return lines
