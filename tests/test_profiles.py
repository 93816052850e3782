"""Agent profiles: expanded into the spec before the start, refused before anything starts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import agentledger
import agentledger.demo
from agentledger.core.errors import ProfileError
from agentledger.profiles import Agent, load_agents
from agentledger.store import tool_sets
from tests.test_cli import run_cli

PROFILES = """
writer:
  instructions: Write plainly.
  model: {model: small-model, temperature: 0.3}
  tools: [search_notes, shout]
  max_steps: 4
"""


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "agents.yaml"
    path.write_text(PROFILES)
    return path


def test_a_profile_expands_into_the_spec_and_fields_override_it(profile_file: Path) -> None:
    writer = load_agents(str(profile_file))["writer"]
    spec = writer.spec("Draft the note.", max_steps=9)
    assert (spec.agent, spec.instructions, spec.allowed_tools) == (
        "writer",
        "Write plainly.",
        ["search_notes", "shout"],
    )
    assert (spec.model.model, spec.model.temperature, spec.max_steps) == ("small-model", 0.3, 9)
    assert spec.profile_hash == writer.profile_hash()
    changed = writer.model_copy(update={"instructions": "Write tersely."})
    assert changed.profile_hash() != writer.profile_hash(), "any change names a new profile"


def test_profiles_load_from_python_and_refuse_bad_sources(profile_file: Path) -> None:
    assert load_agents("agentledger.demo:agents") == {"support-desk": agentledger.demo.support_desk}
    assert isinstance(agentledger.demo.support_desk, agentledger.Agent)
    profile_file.write_text("writer: {tools: [a]}")
    with pytest.raises(ProfileError, match=r"writer.*instructions: Field required"):
        load_agents(str(profile_file))
    with pytest.raises(ProfileError, match="has no attribute"):
        load_agents("agentledger.demo:nobody")


async def test_start_refuses_an_unknown_agent_or_a_tool_no_worker_has(
    settings, pool, profile_file: Path, tmp_path: Path
) -> None:
    flags = ["start", "--agents", str(profile_file), "--task", "Draft the note."]

    unknown = await run_cli(settings, tmp_path, *flags, "--agent", "editor")
    assert unknown.code == 2
    assert "no agent 'editor'" in unknown.err and "it has: writer" in unknown.err

    unserved = await run_cli(settings, tmp_path, *flags, "--agent", "writer")
    assert unserved.code == 5 and "no worker has served task queue" in unserved.err

    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    lacking = await run_cli(settings, tmp_path, *flags, "--agent", "writer")
    assert lacking.code == 5 and "have no tool shout" in lacking.err, lacking.err
    await tool_sets.leave(pool, settings.task_queue, "w")


def test_a_profile_sets_what_a_message_to_its_runs_does():
    """`on_message` (docs/steering.md) reaches the run's spec; at its default it leaves the
    profile's hash as it was before the field existed."""
    plain = Agent(name="a", instructions="Be brief.")
    interrupting = plain.model_copy(update={"on_message": "interrupt"})
    assert plain.spec("t").on_message == "queue"
    assert interrupting.spec("t").on_message == "interrupt"
    before = hashlib.sha256(
        json.dumps(
            plain.model_dump(
                mode="json",
                exclude={
                    "on_message",
                    "subagents",
                    "session",
                    "double_texting",
                    "local_read_only_tools",
                },
            ),
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    assert plain.profile_hash() == before
    assert interrupting.profile_hash() != before


def test_a_profile_makes_its_runs_sessions():
    """`session` (docs/steering.md) reaches the run's spec, a span read as seconds; unset, it
    leaves the profile's hash and spec as they were before the field existed."""
    plain = Agent(name="a", instructions="Be brief.")
    chatty = Agent(name="a", instructions="Be brief.", session={"idle_timeout": "30m"})
    assert "session" not in plain.spec_fields() and plain.spec("t").session is None
    session = chatty.spec("t").session
    assert session is not None and session.idle_timeout == 1800
    assert session.compact_after_turns == 20
    assert chatty.profile_hash() != plain.profile_hash()


def test_a_profiles_file_is_read_once_and_again_when_it_changes(tmp_path: Path) -> None:
    """A server answers each request from the profiles it read; an edit to the file (a new
    instruction, a new agent) is read at the next request."""
    path = tmp_path / "agents.yaml"
    path.write_text("writer:\n  instructions: Be brief.\n  tools: [search_notes]\n")
    first = load_agents(str(path))
    assert load_agents(str(path))["writer"] is first["writer"], "read once"
    path.write_text(
        "writer:\n  instructions: Be thorough.\n  tools: [search_notes]\n"
        "reviewer:\n  instructions: Check it.\n  tools: [search_notes]\n"
    )
    again = load_agents(str(path))
    assert again["writer"].instructions == "Be thorough." and "reviewer" in again
    again.pop("reviewer")
    assert "reviewer" in load_agents(str(path)), "a caller's changes stay its own"
    path.unlink()
    with pytest.raises(ProfileError):
        load_agents(str(path))
