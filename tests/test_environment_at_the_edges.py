"""The environment is read at the edges only: nothing agentledger runs under the
plugin reads os.environ, and fault injection is no setting of a user's but a plan only the
chaos suite and tests install."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from pydantic import ValidationError
from temporalio.testing import WorkflowEnvironment

from agentledger.activities.provider_clients import ProviderClients
from agentledger.core import faults
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.core.providers import Provider

ROOT = Path(__file__).resolve().parent.parent
FAULT_VARIABLES = {"AGENTLEDGER_FAULTS", "AGENTLEDGER_ZOMBIE_SECONDS"}


def test_the_plugin_reads_no_environment(env: WorkflowEnvironment, database_url, model_server):
    """Imported, put on a Client, a Worker and a Replayer, and past a fault point, agentledger
    under the plugin reads no variable, not even a named provider's key variable: the
    application's configuration is all it has."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.environment_audit",
            env.client.service_client.config.target_host,
            database_url,
            model_server.base_url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "AGENTLEDGER_FAULTS": "tool.before_run",
            "AUDIT_PROVIDER_KEY": "set, so a read of it would be found, not fail",
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reads = json.loads(done.stdout.strip().splitlines()[-1])
    assert reads == [], f"agentledger read the environment under the plugin at {reads}"


def test_no_setting_arms_a_fault(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AGENTLEDGER_FAULTS", "tool.after_effect")
    assert not FAULT_VARIABLES & set(AgentLedgerConfig.load({}).shown()), (
        "`agentledger settings` lists it"
    )
    assert not faults.armed("tool.after_effect"), "a variable armed a fault"


def test_a_plan_a_test_installs_arms_its_points():
    faults.install(faults.FaultPlan.parse("tool.after_effect:send_message", zombie_seconds=1))
    try:
        assert faults.armed("tool.after_effect", "send_message")
        assert not faults.armed("tool.after_effect", "lookup_policy")
        assert not faults.armed("tool.before_run", "send_message")
    finally:
        faults.install(faults.FaultPlan())
    assert not faults.armed("tool.after_effect", "send_message")
    with pytest.raises(ValueError, match="unknown fault points"):
        faults.FaultPlan.parse("tool.after_efect")


def test_a_provider_key_not_handed_over_stops_the_worker_naming_it(model_server):
    """The engine no longer looks a key up for itself: a provider that takes one and was given
    none is refused when its clients are built, with what to do; the application reads it at
    its edge with `AgentLedgerConfig.with_provider_keys`."""
    provider = {"base_url": model_server.base_url, "api_key_env": "SOME_PROVIDER_KEY"}
    named = {"named": Provider(**provider)}
    default = openai.AsyncOpenAI(api_key="x")
    with pytest.raises(SetupError, match=r"'named' takes a key.*SOME_PROVIDER_KEY.*provider_keys"):
        ProviderClients(default, named, {})
    config = AgentLedgerConfig(
        database_url="postgresql://unused", providers=json.dumps({"named": provider})
    )
    keys = config.with_provider_keys({"SOME_PROVIDER_KEY": " k-1 \n"}).provider_keys
    assert ProviderClients(default, named, keys).get("named").client.api_key == "k-1"


def test_one_config_from_the_environment_or_a_program():
    """An edge reads the environment into the one config once; a program builds the same
    object by its fields' names, validated as the variables are, and a name no field has is
    refused (it would change nothing)."""
    read = AgentLedgerConfig.read(
        {
            "DATABASE_URL": "postgresql://u@db/agentledger",
            "AGENTLEDGER_WORKFLOW_CACHE": "7",
            "AGENTLEDGER_BUILD_ID": "b-2",
            "AGENTLEDGER_MODEL_STREAM": "0",
            "AGENTLEDGER_TENANT": "acme",
            "AGENTLEDGER_HTTP_PORT": "9000",
            "AGENTLEDGER_TOOLS": "my_tools:registry, more:tools",
        }
    )
    assert (read.workflow_cache, read.build_id, read.model_stream) == (7, "b-2", False)
    assert (read.tenant, read.http.port) == ("acme", 9000)
    assert read.tools == ("my_tools:registry", "more:tools")
    built = AgentLedgerConfig(
        database_url="postgresql://u@db/agentledger",
        workflow_cache=7,
        build_id="b-2",
        model_stream=False,
        tenant="acme",
        tools=["my_tools:registry", "more:tools"],
    )
    assert built.model_dump(exclude={"http"}) == read.model_dump(exclude={"http"})
    with pytest.raises(ValidationError, match="tenant"):
        AgentLedgerConfig(tenant="x" * 201)
    with pytest.raises(ValidationError, match="model_base_url"):
        AgentLedgerConfig(model_base_url="http://m/v1")


def environment_reads(source: str) -> list[int]:
    """The lines that read the process's environment: `os.environ`, `os.getenv`, `environ`
    imported from os."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in ("environ", "getenv", "environb", "getenvb")
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in ("environ", "getenv") for alias in node.names)
        ):
            found.append(node.lineno)
    return found


def test_the_client_side_reads_no_environment():
    """The client classes act on the config their edge read (the CLI, the HTTP server, a
    program's `AgentLedgerConfig`): an eval's judges take their providers' keys from it, an
    approver's keys folder too."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "agentledger" / "client").glob("*.py"))
        for line in environment_reads(path.read_text())
    ]
    assert not found, f"read the environment at the edge, into the config: {found}"
    assert environment_reads("import os\nos.environ.get('X')\n") == [2]
    assert environment_reads("from os import getenv\n") == [1]


def test_an_eval_reads_its_judges_keys_where_the_command_starts(tmp_path):
    """`eval run` reads the keys of the providers its LLM judges call with the rest of its
    config, at the command's start: a key variable not set is refused there, naming it."""
    judge = {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "JUDGE_KEY_NOT_SET"}
    env = {k: v for k, v in os.environ.items() if k != "JUDGE_KEY_NOT_SET"}
    done = subprocess.run(
        [sys.executable, "starter.py", "eval", "run", "cases.yaml", "--candidate", "desk"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "AGENTLEDGER_PROVIDERS": json.dumps({"judge": judge}),
             "AGENTLEDGER_HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: model provider 'judge'"), done.stderr
    assert "JUDGE_KEY_NOT_SET" in done.stderr


def test_the_approver_keys_folder_is_read_at_the_edge(tmp_path):
    """XDG_CONFIG_HOME is read with the rest of the config; AGENTLEDGER_CONFIG_DIR wins."""
    xdg = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert AgentLedgerConfig.load(xdg).config_dir == tmp_path / "xdg" / "agentledger"
    named = AgentLedgerConfig.load({**xdg, "AGENTLEDGER_CONFIG_DIR": str(tmp_path / "keys")})
    assert named.config_dir == tmp_path / "keys"
