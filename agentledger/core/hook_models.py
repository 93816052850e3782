"""Webhook triggers: a hook an admin makes in a tenant, the task a
delivery's body fills in, and how a delivery proves it came from whoever holds the secret.
Pure: no I/O, the clock is the caller's.

A hook is addressed `TENANT.NAME` (`POST /v1/hooks/TENANT.NAME`): the tenant is the one its
admin made it in, never anything a delivery says. A delivery is signed one of two ways,
both HMAC-SHA256 with the hook's secret:
- `AgentLedger-Signature: t=<unix seconds>,v1=<hex>` over `t.` + the raw body, as the
  signed deliveries agentledger sends (agentledger.core.webhook_signatures), refused
  outside the replay window;
- GitHub's `X-Hub-Signature-256: sha256=<hex>` over the raw body (GitHub signs no time:
  its `X-GitHub-Delivery` id is what makes a replay the same delivery).
The delivery's id (`X-GitHub-Delivery`, `AgentLedger-Delivery`, else a digest of what was
signed) names its run, so a delivery sent again starts nothing new.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator

from agentledger.core.schedule_models import check_name
from agentledger.core.spec import MAX_TASK_CHARS, JsonDict
from agentledger.core.webhook_signatures import SIGNATURE_HEADER, BadSignature, verify

GITHUB_SIGNATURE = "x-hub-signature-256"
GITHUB_DELIVERY = "x-github-delivery"
DELIVERY_HEADER = "agentledger-delivery"
# `{body.issue.title}`: a path into the delivery's JSON body (`{{` and `}}` are braces).
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
PATH = re.compile(r"body(?:\.[A-Za-z0-9_-]+)*")


class HookRequest(BaseModel):
    """A hook as an admin asks for it: its name, the agent a delivery runs, and the task
    (a template the delivery's body fills in)."""

    name: str
    agent: str | None = Field(None, description="an agent profile; None: the default agent")
    task: str = Field(
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="the task, with {body.path.to.field} filled in from each delivery",
    )
    secret: str | None = Field(
        None, min_length=16, max_length=500, description="its secret; None: one is made"
    )

    @field_validator("name")
    @classmethod
    def _a_name(cls, name: str) -> str:
        return check_name(name, "hook")

    @field_validator("task")
    @classmethod
    def _a_template(cls, task: str) -> str:
        for match in PLACEHOLDER.finditer(task):
            if match[1] is not None and not PATH.fullmatch(match[1]):
                raise ValueError(
                    f"{{{match[1]}}} is not a path into the delivery's body: write it like "
                    "{body.issue.title} (`{{` and `}}` for braces)"
                )
        return task


class HookRow(BaseModel):
    """A hook (`hooks list`): never its secret."""

    tenant: str = Field(description="the tenant it was made in: every run it starts is its")
    name: str = Field(description="its name in its tenant")
    agent: str = Field(description="the agent its deliveries run")
    task_template: str = Field(description="the task, with {body.path} filled in per delivery")
    spec: JsonDict = Field(description="the run-spec fields its agent's profile set")
    created_by: str = Field(description="who made it")
    created_at: datetime | None = Field(None, description="when")

    @property
    def address(self) -> str:
        return hook_address(self.tenant, self.name)


class NewHook(BaseModel):
    """A hook just made: where deliveries go, and its secret, shown this once."""

    hook: HookRow = Field(description="the hook")
    path: str = Field(description="POST deliveries here")
    secret: str = Field(description="its signing secret, answered this once")


class HookStarted(BaseModel):
    """What a delivery started: its run (the same run for the same delivery)."""

    run_id: str = Field(description="the run the delivery started")
    existing: bool = Field(description="true: the delivery was taken before; this is its run")
    delivery_id: str = Field(description="the delivery's id, which names its run")


def hook_address(tenant: str, name: str) -> str:
    return f"{tenant}.{name}"


def parse_address(address: str) -> tuple[str, str] | None:
    """(tenant, name) of a hook's address, or None if it cannot be one."""
    tenant, dot, name = address.partition(".")
    if not dot or not tenant or not NAME_OR_TENANT.fullmatch(tenant):
        return None
    return (tenant, name) if NAME_OR_TENANT.fullmatch(name) else None


NAME_OR_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,199}")


def task_for(template: str, body: Any) -> str:
    """The task a delivery's body makes of the hook's template; ValueError naming a path the
    body lacks."""

    def filled(match: re.Match[str]) -> str:
        if match[0] in ("{{", "}}"):
            return match[0][0]
        value: Any = {"body": body}
        for part in match[1].split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                raise ValueError(f"the delivery's body has no {match[1]}")
        return value if isinstance(value, str) else json.dumps(value)

    task = PLACEHOLDER.sub(filled, template)
    if not task.strip():
        raise ValueError("the task the delivery makes is empty")
    return task[:MAX_TASK_CHARS]


def verified(secret: str, body: bytes, headers: Mapping[str, str], *, now: float) -> str:
    """The delivery's id, if its signature holds (either scheme); BadSignature if not."""
    generic = headers.get(SIGNATURE_HEADER.lower())
    github = headers.get(GITHUB_SIGNATURE)
    if generic is not None:
        verify(secret, body, generic, now=now)
        proof = generic
    elif github is not None:
        scheme, _, digest = github.partition("=")
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if scheme != "sha256" or not hmac.compare_digest(expected, digest):
            raise BadSignature("the X-Hub-Signature-256 does not match this body and secret")
        proof = github
    else:
        raise BadSignature(
            f"no signature: send {SIGNATURE_HEADER} (t=<seconds>,v1=<hex>) or "
            "X-Hub-Signature-256 (sha256=<hex>)"
        )
    named = headers.get(GITHUB_DELIVERY) or headers.get(DELIVERY_HEADER)
    if named:
        return named[:200]
    return "sha256-" + hashlib.sha256(proof.encode() + b"\n" + body).hexdigest()[:32]
