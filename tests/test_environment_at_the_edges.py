"""The environment is read at the edges only (issue 37): nothing agentledger runs under the
plugin reads os.environ, and fault injection is no setting of a user's but a plan only the
chaos suite and tests install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from temporalio.testing import WorkflowEnvironment

from agentledger import AgentLedgerConfig
from agentledger.activities.provider_clients import ProviderClients
from agentledger.core import faults
from agentledger.core.errors import SetupError
from agentledger.core.providers import Provider
from agentledger.core.settings import Settings

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
    assert not FAULT_VARIABLES & set(Settings.load({}).shown()), "`agentledger settings` lists it"
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
    config = AgentLedgerConfig("postgresql://unused", providers=json.dumps({"named": provider}))
    keys = config.with_provider_keys({"SOME_PROVIDER_KEY": " k-1 \n"}).provider_keys
    assert ProviderClients(default, named, keys).get("named").client.api_key == "k-1"


def test_an_edge_s_settings_reach_the_plugin_whole():
    """`AgentLedgerConfig.from_settings` (agentledger-worker, RunClient.connect): what has no field
    of the config (the workflow cache, the build, streaming) is kept, and a field given
    over the settings wins, validated as its variable would be."""
    read = Settings.read(
        {
            "DATABASE_URL": "postgresql://u@db/agentledger",
            "AGENTLEDGER_WORKFLOW_CACHE": "7",
            "AGENTLEDGER_BUILD_ID": "b-2",
            "AGENTLEDGER_MODEL_STREAM": "0",
            "AGENTLEDGER_TENANT": "acme",
        }
    )
    config = AgentLedgerConfig.from_settings(read, task_queue="orders", telemetry=True)
    kept = config.settings()
    assert (kept.workflow_cache, kept.build_id, kept.model_stream) == (7, "b-2", False)
    assert (kept.task_queue, kept.otel, kept.tenant) == ("orders", True, "acme")
    assert kept.database_url == "postgresql://u@db/agentledger"
    with pytest.raises(SetupError, match="AGENTLEDGER_TENANT"):
        AgentLedgerConfig.from_settings(read, tenant="x" * 201).settings()
