"""Agent profiles: a named agent's instructions, model, tools and policies, in YAML or Python.

The starter expands a profile into the run's spec before it starts the run, so Temporal's
history holds exactly what ran; the spec records the agent's name and the profile's hash, and
the receipt and the mirror carry both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from agentledger.core.constants import DoubleTexting
from agentledger.core.errors import ProfileError, ToolLoadError
from agentledger.core.spec import (
    DOUBLE_TEXTING_HELP,
    MAX_TASK_CHARS,
    ApprovalPolicy,
    Budget,
    FailurePolicy,
    ModelSettings,
    RunSpec,
    SessionSpec,
    StepTimeouts,
    Strict,
    SubagentLimits,
    VerifySpec,
)
from agentledger.core.yaml_files import load_yaml


def read_yaml_mapping(path: str, what: str) -> dict[str, Any]:
    """A YAML (or JSON) file that must hold a mapping: profiles, or a run spec."""
    try:
        raw = load_yaml(Path(path).read_text()) or {}
    except OSError as err:
        raise ProfileError(f"cannot read {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise ProfileError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: {what} must be a mapping")
    return raw


class Agent(Strict):
    """A named agent. Every field but `name` and `instructions` has the run spec's default."""

    name: str = Field(min_length=1, max_length=200)
    instructions: str = Field(min_length=1, max_length=MAX_TASK_CHARS)
    model: ModelSettings = Field(default_factory=ModelSettings)
    tools: list[str] | None = Field(None, description="the tools it may call; None: all")
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    verify: VerifySpec = Field(default_factory=VerifySpec)
    budget: Budget = Field(default_factory=Budget)
    failures: FailurePolicy = Field(default_factory=FailurePolicy)
    timeouts: StepTimeouts = Field(default_factory=StepTimeouts)
    max_steps: int = Field(20, ge=1, le=500)
    on_message: Literal["queue", "interrupt"] = Field(
        "queue", description="what a message said to its runs does (docs/steering.md)"
    )
    session: SessionSpec | None = Field(
        None, description="its runs stay open for the next message (docs/steering.md)"
    )
    double_texting: DoubleTexting | None = Field(None, description=DOUBLE_TEXTING_HELP)
    subagents: list[str] = Field(
        default_factory=list,
        description="agents (by name, from the same profiles) it may delegate to, each as a "
        "tool `agent__NAME` (docs/subagents.md)",
    )
    local_read_only_tools: bool = Field(
        True,
        description="its read-only, low-risk tools run as local activities, in the run's "
        "workflow task (docs/architecture.md); False: every tool call of its runs is an "
        "activity of its own, and a spec naming it cannot turn that back on",
    )

    def profile_hash(self) -> str:
        """Changes whenever anything the agent does would: its whole profile, canonically.
        Fields added since hashes were first given leave them as they were at their default."""
        unset = {"on_message"} if self.on_message == "queue" else set()
        unset |= set() if self.subagents else {"subagents"}
        unset |= set() if self.session else {"session"}
        unset |= set() if self.double_texting else {"double_texting"}
        unset |= set() if not self.local_read_only_tools else {"local_read_only_tools"}
        canonical = json.dumps(self.model_dump(mode="json", exclude=unset), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def spec_fields(self, agents: dict[str, Agent] | None = None, depth: int = 0) -> dict[str, Any]:
        """The run-spec fields this profile sets; its sub-agents' from `agents` (the profiles
        it was loaded with), to the depth the limits allow."""
        unset = set() if self.session else {"session"}
        unset |= set() if self.double_texting else {"double_texting"}
        fields = self.model_dump(mode="json", exclude={"name", "tools", "subagents", *unset})
        if self.subagents and agents is not None:
            fields["subagents"] = subagent_fields(self, agents, depth)
        return {
            **fields,
            "agent": self.name,
            "allowed_tools": self.tools,
            "profile_hash": self.profile_hash(),
        }

    def spec(
        self, task: str, *, agents: dict[str, Agent] | None = None, **overrides: Any
    ) -> RunSpec:
        """A run of this agent on `task`; its sub-agents' profiles come from `agents` (the
        profiles it was loaded with, by name); `overrides` replace whole spec fields."""
        fields = self.spec_fields(agents)
        return RunSpec.model_validate({**fields, "task": task, **overrides})


def subagent_fields(agent: Agent, agents: dict[str, Agent], depth: int) -> dict[str, Any]:
    """Each sub-agent's spec fields, by name; below the deepest level allowed, none."""
    if depth + 1 >= SubagentLimits().max_depth + 1:
        return {}
    missing = [name for name in agent.subagents if name not in agents]
    if missing:
        raise ProfileError(
            f"agent {agent.name!r} delegates to {missing}, which are not among the profiles "
            f"loaded with it ({sorted(agents)})"
        )
    return {name: agents[name].spec_fields(agents, depth + 1) for name in agent.subagents}


# Profiles files as last read, by path: each with what its file was then (modified time,
# size, inode), so a server reads a file once and again only when it changed.
_read: dict[str, tuple[tuple[int, int, int], dict[str, Agent]]] = {}


def load_agents(source: str) -> dict[str, Agent]:
    """Agents by name from a YAML/JSON file (a mapping of name to profile) or from a
    `PKG.MODULE:ATTR` naming an Agent, a list of them or a mapping. A file is read once and
    read again when it changes (a server answers each request from what it read)."""
    path = Path(source)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or path.is_file():
        try:
            stat = path.stat()
            version = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except OSError:
            version = None  # reading it says what is wrong
        cached = _read.get(source)
        if version is not None and cached is not None and cached[0] == version:
            return dict(cached[1])
        raw = read_yaml_mapping(source, "agent profiles (name: profile)")
        agents = {name: _agent(source, name, body) for name, body in raw.items()}
        if version is not None:
            _read[source] = (version, agents)
        return dict(agents)
    # Here, not at the top: the public types import Agent, and the tool loader loads stores.
    from agentledger.tools.loading import resolve

    try:
        target = resolve(source)
    except ToolLoadError as err:
        raise ProfileError(str(err)) from err
    found = list(target.values()) if isinstance(target, Mapping) else target
    found = found if isinstance(found, list | tuple) else [found]
    if not all(isinstance(a, Agent) for a in found):
        raise ProfileError(f"{source!r} is not an Agent, a list of them or a mapping")
    return {a.name: a for a in found}


def _agent(source: str, name: Any, body: Any) -> Agent:
    if not isinstance(body, dict):
        raise ProfileError(f"{source}: agent {name!r} must be a mapping of profile fields")
    try:
        return Agent.model_validate({"name": str(name), **body})
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ProfileError(f"{source}: agent {name!r}: {problems}") from err


def pick(agents: Mapping[str, Agent], name: str, source: str) -> Agent:
    try:
        return agents[name]
    except KeyError:
        known = ", ".join(sorted(agents)) or "none"
        raise ProfileError(f"no agent {name!r} in {source} (it has: {known})") from None
