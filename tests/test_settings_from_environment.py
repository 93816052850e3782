"""Every setting in the settings table (docs/using.md), read from a real process environment.

Each row of the settings table is set in the process environment: a valid value shows
in `agentledger settings`; an invalid one stops the CLI, the worker and the codec server alike
with exit 2 and one line naming the variable, never a traceback. The cases are keyed by the
README's own names, so a new row without a case here fails until it has one. The cases run in
one process of tests/entry_points_driver.py (one process per case took 25 minutes on a busy
machine); the issue's own reproductions also run in processes of their own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import TASK_QUEUE

ROOT = Path(__file__).resolve().parent.parent
KEY = base64.b64encode(bytes(range(32))).decode()
OLD_KEY = base64.b64encode(bytes(range(32, 64))).decode()
SHORT_KEY = base64.b64encode(bytes(16)).decode()

# Each entry point and the arguments it is run with.
ENTRY_POINTS = {"cli": ["list", "--wait", "1"], "worker": [], "codec server": ["--port", "0"]}
PROCESSES = {
    "cli": [sys.executable, "-m", "agentledger", "list", "--wait", "1"],
    "worker": [sys.executable, "-m", "agentledger.worker.main"],
    "codec server": [sys.executable, "-m", "agentledger.temporal.codec_server", "--port", "0"],
}


@dataclass
class Case:
    """`valid`: (environment, what `agentledger settings` shows for some variables);
    `invalid`: environments every entry point refuses, naming `names` (default the row's);
    `no_invalid`: why no value of the variable can be malformed."""

    valid: list[tuple[dict[str, str], dict[str, str]]]
    invalid: list[dict[str, str]] = field(default_factory=list)
    no_invalid: str = ""


ANY_STRING = "any text is a valid name; the service it names decides"

# {tmp}: a fresh folder; {file}: a file in it; {cert}, {key}, {toml}: files made there.
CASES: dict[str, Case] = {
    "TEMPORAL_ADDRESS": Case(
        [({"TEMPORAL_ADDRESS": "temporal.example:7233"}, {})],
        [{"TEMPORAL_ADDRESS": "temporal.example"}, {"TEMPORAL_ADDRESS": "host:port"}],
    ),
    "TEMPORAL_API_KEY": Case(
        [({"TEMPORAL_API_KEY": "key-123"}, {"TEMPORAL_API_KEY": "<set>", "TEMPORAL_TLS": "on"})],
        no_invalid="any text is a key; a wrong one is refused by the server",
    ),
    "TEMPORAL_TLS_CLIENT_CERT_PATH": Case(
        [
            (
                {
                    "TEMPORAL_TLS_CLIENT_CERT_PATH": "{cert}",
                    "TEMPORAL_TLS_CLIENT_KEY_PATH": "{key}",
                },
                {"TEMPORAL_TLS": "on, client certificate"},
            )
        ],
        [
            {
                "TEMPORAL_TLS_CLIENT_CERT_PATH": "{tmp}/none.pem",
                "TEMPORAL_TLS_CLIENT_KEY_PATH": "{key}",
            }
        ],
    ),
    "TEMPORAL_TLS_CLIENT_KEY_PATH": Case(
        [
            (
                {
                    "TEMPORAL_TLS_CLIENT_CERT_PATH": "{cert}",
                    "TEMPORAL_TLS_CLIENT_KEY_PATH": "{key}",
                },
                {"TEMPORAL_TLS": "on, client certificate"},
            )
        ],
        [{"TEMPORAL_TLS_CLIENT_CERT_PATH": "{cert}", "TEMPORAL_TLS_CLIENT_KEY_PATH": "{tmp}/none"}],
    ),
    "TEMPORAL_TLS*": Case(
        [({"TEMPORAL_TLS": "true"}, {"TEMPORAL_TLS": "on"})],
        [{"TEMPORAL_TLS": "maybe"}],
    ),
    "TEMPORAL_PROFILE": Case(
        [
            (
                {"TEMPORAL_CONFIG_FILE": "{toml}", "TEMPORAL_PROFILE": "staging"},
                {"TEMPORAL_ADDRESS": "staging.example:7233", "TEMPORAL_NAMESPACE": "stage"},
            )
        ],
        [{"TEMPORAL_CONFIG_FILE": "{toml}", "TEMPORAL_PROFILE": "nosuch"}],
    ),
    "TEMPORAL_NAMESPACE": Case([({"TEMPORAL_NAMESPACE": "prod.acct"}, {})], no_invalid=ANY_STRING),
    "AGENTLEDGER_TASK_QUEUE": Case(
        [({"AGENTLEDGER_TASK_QUEUE": "billing"}, {})], no_invalid=ANY_STRING
    ),
    "AGENTLEDGER_TOOLS": Case(
        [({"AGENTLEDGER_TOOLS": "my_tools:registry, more.tools:extra"}, {})],
        [{"AGENTLEDGER_TOOLS": "my_tools"}],
    ),
    "AGENTLEDGER_MCP": Case(
        [({"AGENTLEDGER_MCP": "fs=python -m fs_server; docs=https://mcp.example/mcp"}, {})],
        [{"AGENTLEDGER_MCP": "python -m fs_server"}],
    ),
    "AGENTLEDGER_AGENTS": Case(
        [
            ({"AGENTLEDGER_AGENTS": "agents.yaml"}, {}),
            ({"AGENTLEDGER_AGENTS": "my.agents:all"}, {}),
        ],
        [{"AGENTLEDGER_AGENTS": "nowhere"}],
    ),
    "DATABASE_URL": Case(
        [
            (
                {
                    "DATABASE_URL": "postgresql://app:s3cr3t@db.example:6432/runs?sslmode=verify-full"
                },
                {
                    "DATABASE_URL": "user=app password=<set> dbname=runs host=db.example "
                    "port=6432 sslmode=verify-full"
                },
            )
        ],
        [{"DATABASE_URL": "notaurl"}, {"DATABASE_URL": "postgresql://app:s3cr3t@db:port/runs"}],
    ),
    "OPENAI_BASE_URL": Case(
        [({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}, {})],
        [{"OPENAI_BASE_URL": "localhost:8000"}],
    ),
    "OPENAI_API_KEY": Case(
        [({"OPENAI_API_KEY": "sk-s3cr3t"}, {"OPENAI_API_KEY": "<set>"})],
        no_invalid="any text is a key; a wrong one is refused by the provider",
    ),
    "AGENTLEDGER_MODEL": Case([({"AGENTLEDGER_MODEL": "gpt-4.1-mini"}, {})], no_invalid=ANY_STRING),
    "AGENTLEDGER_MODEL_PRICES": Case(
        [
            (
                {"AGENTLEDGER_MODEL_PRICES": '{"gpt-x": [2.5, 10]}'},
                {
                    "AGENTLEDGER_MODEL_PRICES": '{"gpt-x": [2.5, 10.0], '
                    '"offline-planner": [0.15, 0.6]}'
                },
            )
        ],
        [
            {"AGENTLEDGER_MODEL_PRICES": "{bad"},
            {"AGENTLEDGER_MODEL_PRICES": "[1, 2]"},
            {"AGENTLEDGER_MODEL_PRICES": '{"gpt-x": [-1, 2]}'},
        ],
    ),
    "AGENTLEDGER_WEB_UI": Case(
        [({"AGENTLEDGER_WEB_UI": "https://temporal.example"}, {})],
        [{"AGENTLEDGER_WEB_UI": "ui:8233"}],
    ),
    "AGENTLEDGER_PUBLIC_URL": Case(
        [({"AGENTLEDGER_PUBLIC_URL": "https://agents.example"}, {})],
        [{"AGENTLEDGER_PUBLIC_URL": "agents.example"}],
    ),
    "AGENTLEDGER_HOME": Case(
        [({"AGENTLEDGER_HOME": "{tmp}/stack"}, {})], [{"AGENTLEDGER_HOME": "{file}"}]
    ),
    "AGENTLEDGER_TENANT": Case(
        [({"AGENTLEDGER_TENANT": "acme"}, {})], [{"AGENTLEDGER_TENANT": "x" * 201}]
    ),
    "AGENTLEDGER_CONFIG_DIR": Case(
        [({"AGENTLEDGER_CONFIG_DIR": "{tmp}/keys"}, {})], [{"AGENTLEDGER_CONFIG_DIR": "{file}"}]
    ),
    "AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES": Case(
        [({"AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES": "1024"}, {})],
        [
            {"AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES": "64k"},
            {"AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES": "-1"},
        ],
    ),
    "AGENTLEDGER_PAYLOAD_LIMIT_BYTES": Case(
        [({"AGENTLEDGER_PAYLOAD_LIMIT_BYTES": "1000000"}, {})],
        [{"AGENTLEDGER_PAYLOAD_LIMIT_BYTES": "2MB"}, {"AGENTLEDGER_PAYLOAD_LIMIT_BYTES": "0"}],
    ),
    "AGENTLEDGER_SEARCH_ATTRIBUTES": Case(
        [({"AGENTLEDGER_SEARCH_ATTRIBUTES": "off"}, {"AGENTLEDGER_SEARCH_ATTRIBUTES": "0"})],
        [{"AGENTLEDGER_SEARCH_ATTRIBUTES": "maybe"}],
    ),
    "AGENTLEDGER_PROMETHEUS_BIND": Case(
        [({"AGENTLEDGER_PROMETHEUS_BIND": "0.0.0.0:9464"}, {})],
        [{"AGENTLEDGER_PROMETHEUS_BIND": "9464"}, {"AGENTLEDGER_PROMETHEUS_BIND": "host:http"}],
    ),
    "AGENTLEDGER_OTEL_CAPTURE_CONTENT": Case(
        [({"AGENTLEDGER_OTEL_CAPTURE_CONTENT": "yes"}, {"AGENTLEDGER_OTEL_CAPTURE_CONTENT": "1"})],
        [{"AGENTLEDGER_OTEL_CAPTURE_CONTENT": "maybe"}],
    ),
    "AGENTLEDGER_PROVIDERS": Case(
        [({"AGENTLEDGER_PROVIDERS": '{"local": {"base_url": "http://127.0.0.1:9/v1"}}'}, {})],
        [
            {"AGENTLEDGER_PROVIDERS": "{bad"},
            {"AGENTLEDGER_PROVIDERS": '{"local": {"base_url": "ftp://x"}}'},
            {"AGENTLEDGER_PROVIDERS": "{tmp}/no-such-providers.yaml"},
        ],
    ),
    "AGENTLEDGER_CODEC": Case(
        [({"AGENTLEDGER_CODEC": "shopapp.codec:ShopCodec.from_environment"}, {})],
        [{"AGENTLEDGER_CODEC": "shopapp.codec"}],
    ),
    "AGENTLEDGER_CODEC_ENDPOINT": Case(
        [({"AGENTLEDGER_CODEC_ENDPOINT": "https://codec.example"}, {})],
        [{"AGENTLEDGER_CODEC_ENDPOINT": "codec:8081"}],
    ),
    "AGENTLEDGER_SANDBOX": Case(
        [
            (
                {"AGENTLEDGER_SANDBOX": "agentledger-sandbox:test"},
                {"AGENTLEDGER_SANDBOX": "agentledger-sandbox:test"},
            )
        ],
        no_invalid="any image name; the Docker engine decides whether it has it",
    ),
    "AGENTLEDGER_SANDBOX_LIMITS": Case(
        [({"AGENTLEDGER_SANDBOX_LIMITS": "seconds=10,memory_mb=128"}, {})],
        [
            {"AGENTLEDGER_SANDBOX_LIMITS": "nosuch=1"},
            {"AGENTLEDGER_SANDBOX_LIMITS": "seconds=soon"},
            {"AGENTLEDGER_SANDBOX_LIMITS": "pids=0"},
        ],
    ),
    "AGENTLEDGER_LOG_LEVEL": Case(
        [({"AGENTLEDGER_LOG_LEVEL": "debug"}, {"AGENTLEDGER_LOG_LEVEL": "DEBUG"})],
        [{"AGENTLEDGER_LOG_LEVEL": "loud"}],
    ),
    "AGENTLEDGER_LOG_FORMAT": Case(
        [({"AGENTLEDGER_LOG_FORMAT": "json"}, {"AGENTLEDGER_LOG_FORMAT": "json"})],
        [{"AGENTLEDGER_LOG_FORMAT": "xml"}],
    ),
    "AGENTLEDGER_OTEL": Case(
        [({"AGENTLEDGER_OTEL": "true"}, {"AGENTLEDGER_OTEL": "1"})], [{"AGENTLEDGER_OTEL": "maybe"}]
    ),
    "AGENTLEDGER_RETENTION_DAYS": Case(
        [({"AGENTLEDGER_RETENTION_DAYS": "30"}, {"AGENTLEDGER_RETENTION_DAYS": "30.0"})],
        [{"AGENTLEDGER_RETENTION_DAYS": "a month"}, {"AGENTLEDGER_RETENTION_DAYS": "-1"}],
    ),
    "AGENTLEDGER_BUILD_ID": Case([({"AGENTLEDGER_BUILD_ID": "v2"}, {})], no_invalid=ANY_STRING),
    "AGENTLEDGER_DEPLOYMENT_NAME": Case(
        [({"AGENTLEDGER_DEPLOYMENT_NAME": "fleet"}, {})], no_invalid=ANY_STRING
    ),
    "AGENTLEDGER_WORKFLOW_CACHE": Case(
        [({"AGENTLEDGER_WORKFLOW_CACHE": "10"}, {})],
        [{"AGENTLEDGER_WORKFLOW_CACHE": "-1"}, {"AGENTLEDGER_WORKFLOW_CACHE": "lots"}],
    ),
    "AGENTLEDGER_DRAIN_SECONDS": Case(
        [({"AGENTLEDGER_DRAIN_SECONDS": "2.5"}, {})],
        [{"AGENTLEDGER_DRAIN_SECONDS": "-1"}, {"AGENTLEDGER_DRAIN_SECONDS": "a while"}],
    ),
    "AGENTLEDGER_GC_THRESHOLD": Case(
        [({"AGENTLEDGER_GC_THRESHOLD": "0"}, {})], [{"AGENTLEDGER_GC_THRESHOLD": "-5"}]
    ),
    "AGENTLEDGER_PREPARED_STATEMENTS": Case(
        [({"AGENTLEDGER_PREPARED_STATEMENTS": "false"}, {"AGENTLEDGER_PREPARED_STATEMENTS": "0"})],
        [{"AGENTLEDGER_PREPARED_STATEMENTS": "never"}],
    ),
    "AGENTLEDGER_MODEL_STREAM": Case(
        [({"AGENTLEDGER_MODEL_STREAM": "off"}, {"AGENTLEDGER_MODEL_STREAM": "0"})],
        [{"AGENTLEDGER_MODEL_STREAM": "sometimes"}],
    ),
    "AGENTLEDGER_ENCRYPTION_KEYS": Case(
        [
            (
                {"AGENTLEDGER_ENCRYPTION_KEYS": f"k2:{KEY},k1:{OLD_KEY}"},
                {
                    "AGENTLEDGER_ENCRYPTION_KEYS": "k2:<key>,k1:<key>",
                    "AGENTLEDGER_ENCRYPTION_KEY_ID": "k2",
                },
            )
        ],
        [
            {"AGENTLEDGER_ENCRYPTION_KEYS": "k1:not base64!"},
            {"AGENTLEDGER_ENCRYPTION_KEYS": f"k1:{SHORT_KEY}"},
            {"AGENTLEDGER_ENCRYPTION_KEYS": KEY},
        ],
    ),
    "AGENTLEDGER_ENCRYPTION_KEY_ID": Case(
        [
            (
                {
                    "AGENTLEDGER_ENCRYPTION_KEYS": f"k2:{KEY},k1:{OLD_KEY}",
                    "AGENTLEDGER_ENCRYPTION_KEY_ID": "k1",
                },
                {},
            )
        ],
        [{"AGENTLEDGER_ENCRYPTION_KEYS": f"k2:{KEY}", "AGENTLEDGER_ENCRYPTION_KEY_ID": "k9"}],
    ),
}


def readme_variables() -> list[str]:
    """The variables the settings table (docs/using.md) names, in its order."""
    text = (ROOT / "docs" / "using.md").read_text()
    table = text.split("## Settings", 1)[1].split("\n\n", 2)[1]
    names: list[str] = []
    for row in table.splitlines()[2:]:
        first_cell = row.split("|")[1]
        names += re.findall(r"`([A-Z_]+\*?)`", first_cell)
    return names


README_VARIABLES = readme_variables()
SECRETS = ("s3cr3t", KEY, OLD_KEY)


def settings_variables() -> set[str]:
    return {
        f.validation_alias
        for f in AgentLedgerConfig.model_fields.values()
        if isinstance(f.validation_alias, str)
    }


def clean_environment(tmp_path: Path) -> dict[str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTLEDGER_", "TEMPORAL_", "OPENAI_")) and k != "DATABASE_URL"
    }
    return {**environ, "AGENTLEDGER_HOME": str(tmp_path / "home")}


def filled(values: dict[str, str], tmp_path: Path) -> dict[str, str]:
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "client.pem").write_text(
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    )
    (tmp_path / "client.key").write_text(
        "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"
    )
    (tmp_path / "temporal.toml").write_text(
        '[profile.staging]\naddress = "staging.example:7233"\nnamespace = "stage"\n'
    )
    places = {
        "{tmp}": str(tmp_path),
        "{file}": str(tmp_path / "a-file"),
        "{cert}": str(tmp_path / "client.pem"),
        "{key}": str(tmp_path / "client.key"),
        "{toml}": str(tmp_path / "temporal.toml"),
    }
    out = {}
    for name, value in values.items():
        for mark, place in places.items():
            value = value.replace(mark, place)
        out[name] = value
    return out


def test_every_operator_setting_is_in_the_readme_table_and_has_a_case():
    documented = set(README_VARIABLES)
    assert settings_variables() - documented == set()
    assert documented - set(CASES) == set(), "add a case for each new README row"


DRIVER = ROOT / "tests" / "entry_points_driver.py"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, int, str], Any]:
    """Every case of every row through its entry points, in one process of DRIVER: a valid
    value through `agentledger settings --json`, an invalid one through all three."""
    tmp_path = tmp_path_factory.mktemp("settings")
    keys: list[tuple[str, str, int, str]] = []
    runs: list[dict[str, Any]] = []
    for name, case in CASES.items():
        for index, (values, _) in enumerate(case.valid):
            keys.append((name, "valid", index, "cli"))
            env = {**clean_environment(tmp_path), **filled(values, tmp_path)}
            runs.append({"entry": "cli", "args": ["settings", "--json"], "env": env})
        for index, values in enumerate(case.invalid):
            env = {**clean_environment(tmp_path), **filled(values, tmp_path)}
            for entry, args in ENTRY_POINTS.items():
                keys.append((name, "invalid", index, entry))
                runs.append({"entry": entry, "args": args, "env": env})
    done = subprocess.run(
        [sys.executable, str(DRIVER)],
        input=json.dumps(runs),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return dict(zip(keys, json.loads(done.stdout), strict=True))


@pytest.mark.parametrize("name", README_VARIABLES)
def test_a_valid_value_from_the_environment_is_in_effect(name, outcomes, tmp_path_factory):
    for index, (values, expected) in enumerate(CASES[name].valid):
        outcome = outcomes[(name, "valid", index, "cli")]
        assert outcome["code"] == 0, outcome["err"]
        shown = json.loads(outcome["out"])
        # What was set shows as set, unless the case says how it shows.
        as_set = {
            k: v
            for k, v in values.items()
            if k in shown and k not in expected and "{" not in v and k not in SHOWN_OTHERWISE
        }
        assert {k: shown[k] for k in {**as_set, **expected}} == {**as_set, **expected}
        assert not any(secret in outcome["out"] for secret in SECRETS)


@pytest.mark.parametrize("name", README_VARIABLES)
def test_an_invalid_value_stops_every_entry_point_with_one_line_naming_it(name, outcomes):
    case = CASES[name]
    if not case.invalid:
        assert case.no_invalid, f"{name}: give invalid values, or say why none exist"
        return
    for index, values in enumerate(case.invalid):
        for entry in ENTRY_POINTS:
            outcome = outcomes[(name, "invalid", index, entry)]
            err = outcome["err"]
            lines = err.strip().splitlines()
            assert outcome["code"] == 2, (entry, values, err)
            assert len(lines) == 1 and "Traceback" not in err, (entry, values, err)
            assert any(v in lines[0] for v in values), (entry, values, lines[0])
            assert not any(secret in outcome["out"] + err for secret in SECRETS), (entry, err)


# Shown as the program reads them, not as written (secrets hidden, JSON normalised).
SHOWN_OTHERWISE = {
    "DATABASE_URL",
    "AGENTLEDGER_ENCRYPTION_KEYS",
    "AGENTLEDGER_MODEL_PRICES",
    "OPENAI_API_KEY",
    "TEMPORAL_API_KEY",
}


@pytest.mark.parametrize(
    ("entry", "command"), [(entry, command) for entry, command in PROCESSES.items()]
)
def test_the_reported_failures_in_processes_of_their_own(entry, command, tmp_path):
    """The reproductions, each entry point a process of its own: a valid
    AGENTLEDGER_ENCRYPTION_KEYS is read; AGENTLEDGER_MODEL_PRICES='{bad' is one line, exit 2."""
    environ = clean_environment(tmp_path)
    if entry == "cli":
        keyed = subprocess.run(
            [sys.executable, "-m", "agentledger", "settings", "--json"],
            env={**environ, "AGENTLEDGER_ENCRYPTION_KEYS": f"k1:{KEY}"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert keyed.returncode == 0, keyed.stderr
        assert json.loads(keyed.stdout)["AGENTLEDGER_ENCRYPTION_KEYS"] == "k1:<key>"
    bad = subprocess.run(
        command,
        env={**environ, "AGENTLEDGER_MODEL_PRICES": "{bad"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: invalid setting: AGENTLEDGER_MODEL_PRICES: not JSON (Expecting property name "
        "enclosed in double quotes at character 1)"
    ]


AGENTLEDGER = str(Path(sys.executable).parent / "agentledger")


def agentledger(
    tmp_path: Path, environ: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """The console script as a user runs it, in `tmp_path`, with `environ` set."""
    return subprocess.run(
        [AGENTLEDGER, *args],
        env={**clean_environment(tmp_path), **environ},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_dotenv_file_in_the_current_folder_is_read_and_the_environment_wins(tmp_path):
    (tmp_path / ".env").write_text(
        "# the settings of this folder\n"
        "AGENTLEDGER_TASK_QUEUE=from-dotenv\n"
        "AGENTLEDGER_MODEL=from-dotenv\n"
        "AGENTLEDGER_MODEL_STREAM=off\n"
    )
    done = agentledger(tmp_path, {"AGENTLEDGER_MODEL": "from-environment"}, "settings", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["AGENTLEDGER_TASK_QUEUE"] == "from-dotenv"
    assert shown["AGENTLEDGER_MODEL"] == "from-environment"
    assert shown["AGENTLEDGER_MODEL_STREAM"] == "0"

    (tmp_path / ".env").write_text("AGENTLEDGER_PAYLOAD_LIMIT_BYTES=2MB\n")
    bad = agentledger(tmp_path, {}, "list", "--wait", "1")
    assert bad.returncode == 2
    [line] = bad.stderr.strip().splitlines()
    assert line.startswith("error: invalid setting: AGENTLEDGER_PAYLOAD_LIMIT_BYTES"), line


def test_settings_shows_booleans_as_the_readme_writes_them(tmp_path):
    done = agentledger(tmp_path, {"AGENTLEDGER_OTEL_CAPTURE_CONTENT": "on"}, "settings")
    assert done.returncode == 0, done.stderr
    lines = set(done.stdout.splitlines())
    assert {
        "AGENTLEDGER_OTEL_CAPTURE_CONTENT=1",
        "AGENTLEDGER_OTEL=0",
        "AGENTLEDGER_SEARCH_ATTRIBUTES=1",
    } <= lines, done.stdout
    assert not any(line.endswith(("=True", "=False")) for line in lines), done.stdout


def test_an_unknown_agentledger_variable_is_named_with_the_setting_it_resembles(tmp_path):
    done = agentledger(
        tmp_path,
        {"AGENTLEDGER_TASKQUEUE": "mine", "AGENTLEDGER_NOTHING_LIKE_IT": "x"},
        "settings",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["AGENTLEDGER_TASK_QUEUE"] == TASK_QUEUE
    warned = done.stderr.strip().splitlines()
    assert len(warned) == 2, done.stderr
    assert any(
        "AGENTLEDGER_TASKQUEUE" in line and "did you mean AGENTLEDGER_TASK_QUEUE?" in line
        for line in warned
    ), warned
    assert any("AGENTLEDGER_NOTHING_LIKE_IT" in line for line in warned), warned
    # Under --json, stderr holds the error's one JSON object and nothing else.
    refused = agentledger(tmp_path, {"AGENTLEDGER_TASKQUEUE": "mine"}, "receipt", "run-x", "--json")
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert json.loads(line)["error"]["kind"] == "invalid_input", line


def test_a_variable_of_the_former_name_is_named_with_its_new_name(tmp_path):
    """`AGENTRUN_TASK_QUEUE` (the project's first name) is not read: one line says so and
    names `AGENTLEDGER_TASK_QUEUE`; one with no new counterpart is still named."""
    done = agentledger(
        tmp_path,
        {"AGENTRUN_TASK_QUEUE": "mine", "AGENTRUN_NO_SUCH_THING": "x"},
        "settings",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["AGENTLEDGER_TASK_QUEUE"] == TASK_QUEUE
    warned = done.stderr.strip().splitlines()
    assert len(warned) == 2, done.stderr
    [queue] = [line for line in warned if "AGENTRUN_TASK_QUEUE" in line]
    assert "is not read" in queue and "set AGENTLEDGER_TASK_QUEUE instead" in queue, queue
    [other] = [line for line in warned if "AGENTRUN_NO_SUCH_THING" in line]
    assert "instead" not in other, other


def test_a_yaml_file_that_does_not_parse_is_named_in_one_line(tmp_path):
    broken = tmp_path / "providers.yaml"
    broken.write_text("local:\n  base_url: [http://127.0.0.1:9/v1\n  api_key: x\n")
    done = agentledger(tmp_path, {"AGENTLEDGER_PROVIDERS": str(broken)}, "list", "--wait", "1")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: invalid setting: AGENTLEDGER_PROVIDERS: ({broken})"), line
    assert "line 3, column" in line and "<unicode string>" not in line, line


def test_the_compose_files_variables_are_not_taken_for_misspelt_settings(tmp_path):
    """docker-compose.yml reads its ports, bind address and passwords from AGENTLEDGER_
    variables a user keeps in the same environment: none of them is warned about."""
    compose = (Path(__file__).parents[1] / "docker-compose.yml").read_text()
    settings = {f.validation_alias for f in AgentLedgerConfig.model_fields.values()}
    names = sorted(set(re.findall(r"\$\{(AGENTLEDGER_[A-Z_]+)", compose)) - settings)
    assert "AGENTLEDGER_BIND" in names and "AGENTLEDGER_PG_PASSWORD" in names, names
    done = agentledger(tmp_path, dict.fromkeys(names, "1"), "settings", "--json")
    assert done.returncode == 0, done.stderr
    assert "not a setting" not in done.stderr, done.stderr
