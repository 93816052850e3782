"""Exit codes that mean something, through the real `agentledger` console script.

0 done, 1 a runtime failure, 2 usage or invalid input, 3 not found (another tenant's run
included), 4 a service unreachable, 5 refused by policy or by the run (docs/using.md "Exit
codes"). Under `--json` an error is one JSON object on stderr; a closed pipe ends quietly;
`--help` builds its parser without the heavy libraries; completion scripts work in bash.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo

from agentledger.cli.main import parser
from agentledger.core.config import AgentLedgerConfig
from tests.support import NOTIFY_TASK, wait_pending
from tests.test_cli import ROOT, Result, cli_env

AGENTLEDGER = str(Path(sys.executable).parent / "agentledger")
HEAVY = ("temporalio", "openai", "mcp", "psycopg", "psycopg_pool", "pydantic")


async def agentledger(
    settings: AgentLedgerConfig,
    home: Path,
    *args: str,
    stdout: Any = asyncio.subprocess.PIPE,
    **env: str,
) -> Result:
    proc = await asyncio.create_subprocess_exec(
        AGENTLEDGER,
        *args,
        cwd=ROOT,
        env={**cli_env(settings, home), **env},
        stdout=stdout,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return Result(proc.returncode, (out or b"").decode(), err.decode())


def json_error(result: Result, code: int, kind: str) -> str:
    """The one JSON object on stderr, with `code` and `kind`; its message."""
    assert result.code == code, (result.code, result.out, result.err)
    assert result.out == "", result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    error = json.loads(lines[0])["error"]
    assert (error["code"], error["kind"]) == (code, kind), error
    assert error["message"], error
    return str(error["message"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_usage_and_invalid_input_exit_2(settings, tmp_path):
    home = tmp_path / "home"
    bogus, bogus_json, no_task, bad_priority = await asyncio.gather(
        agentledger(settings, home, "list", "--status", "bogus"),
        agentledger(settings, home, "list", "--status", "bogus", "--json"),
        agentledger(settings, home, "start", "--json"),
        agentledger(settings, home, "start", "--task", "t", "--priority", "9", "--json"),
    )
    assert bogus.code == 2 and bogus.out == ""
    assert "invalid choice: 'bogus'" in bogus.err and "'waiting_for_approval'" in bogus.err
    message = json_error(bogus_json, 2, "invalid_input")
    assert "'bogus'" in message and "'completed'" in message and "'cancelled'" in message
    assert "invalid run spec" in json_error(no_task, 2, "invalid_input")
    assert "--priority" in json_error(bad_priority, 2, "invalid_input")


async def test_an_unknown_run_exits_3(settings, pool, tmp_path):
    home = tmp_path / "home"
    status, receipt, say, end = await asyncio.gather(
        agentledger(settings, home, "status", "run-nope", "--json"),
        agentledger(settings, home, "receipt", "run-nope"),
        agentledger(settings, home, "say", "run-nope", "anyone there?", "--json"),
        agentledger(settings, home, "end", "run-nope", "--json"),
    )
    assert "no run 'run-nope'" in json_error(status, 3, "not_found")
    assert "no run 'run-nope'" in json_error(say, 3, "not_found")
    assert "no run 'run-nope'" in json_error(end, 3, "not_found")
    assert receipt.code == 3 and receipt.err.startswith("error: no run 'run-nope'")
    assert "Traceback" not in receipt.err


async def test_a_service_out_of_reach_exits_4(settings, pool, tmp_path):
    home = tmp_path / "home"
    closed = free_port()
    no_temporal, no_postgres = await asyncio.gather(
        agentledger(
            settings,
            home,
            "status",
            "run-any",
            "--wait",
            "2",
            "--json",
            TEMPORAL_ADDRESS=f"127.0.0.1:{closed}",
        ),
        agentledger(
            settings,
            home,
            "list",
            "--json",
            DATABASE_URL=f"postgresql://nobody@127.0.0.1:{closed}/none",
        ),
    )
    message = json_error(no_temporal, 4, "unreachable")
    assert message.startswith(f"cannot reach Temporal at 127.0.0.1:{closed}"), message
    assert "nothing accepts connections there" in message and "TEMPORAL_ADDRESS" in message
    assert not any(raw in message for raw in ("tonic", "ConnectError", "Os {")), message
    assert "cannot reach Postgres" in json_error(no_postgres, 4, "unreachable")


async def test_a_database_url_naming_a_missing_database_exits_2_naming_it(settings, tmp_path):
    """Postgres answers and has no such database: the setting is wrong, not the service
    out of reach; the message names DATABASE_URL and what to do."""
    missing = make_conninfo(settings.database_url, dbname=f"nope_{uuid.uuid4().hex[:8]}")
    listed = await agentledger(settings, tmp_path / "home", "list", "--json", DATABASE_URL=missing)
    message = json_error(listed, 2, "invalid_input")
    assert message.startswith("invalid setting: DATABASE_URL:"), message
    assert "does not exist" in message and "fix DATABASE_URL" in message, message


def hiding(tmp_path: Path, module: str) -> str:
    """A PYTHONPATH on which `module` reads as not installed, as without its extra."""
    hidden = tmp_path / f"without-{module}" / module
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n"
    )
    return os.pathsep.join([str(hidden.parent), os.environ.get("PYTHONPATH", "")])


async def test_tracing_without_its_extra_says_the_checkouts_install_command(settings, tmp_path):
    """AGENTLEDGER_OTEL=1 where OpenTelemetry is not installed: exit 2 with the one command that
    installs the extra here, a checkout (`pip install 'agentledger[otel]'` from the registry
    would replace the checkout's editable install; scripts/wheel_check.sh sees a wheel's)."""
    status = await agentledger(
        settings,
        tmp_path / "home",
        "status",
        "run-any",
        "--wait",
        "5",
        "--json",
        AGENTLEDGER_OTEL="1",
        PYTHONPATH=hiding(tmp_path, "opentelemetry"),
    )
    message = json_error(status, 2, "invalid_input")
    assert "`pip install -e '.[otel]'`" in message, message


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "dataset", "--agent", "support-desk", "-o", "cases.yaml"],
        ["eval", "run", "cases.yaml", "--candidate", "support-desk"],
    ],
)
async def test_a_command_without_its_extra_names_the_one_install_command(
    settings, tmp_path, command
):
    """`eval` without the `evals` extra: one line naming what to install, no traceback."""
    done = await agentledger(
        settings,
        tmp_path / "home",
        *command,
        "--wait",
        "5",
        PYTHONPATH=hiding(tmp_path, "pydantic_evals"),
    )
    assert done.code == 2, done
    assert done.err.strip() == (
        "error: this needs the `evals` extra (pydantic_evals is not installed): "
        "`pip install -e '.[evals]'`"
    ), done.err


async def test_refusals_failures_other_tenants_and_closed_pipes(client, settings, worker, tmp_path):
    """One run of tenant A: refused decisions exit 5, tenant B's view of it exits 3 as a
    missing run does, a closed pipe ends quietly, and a run that ended cancelled is a
    runtime failure to `watch` (1)."""
    home = tmp_path / "home"
    acme, globex = f"acme-{uuid.uuid4().hex[:6]}", f"globex-{uuid.uuid4().hex[:6]}"
    key = f"codes-{uuid.uuid4().hex[:8]}"
    async with worker():
        started = await agentledger(
            settings,
            home,
            *("start", "--task", NOTIFY_TASK, "--tenant", acme, "--idempotency-key", key),
            "--json",
        )
        assert started.code == 0, started.err
        run_id = started.json()["run_id"]
        await wait_pending(client, run_id)

        pinned = await agentledger(settings, home, "version", run_id, "--json")
        assert pinned.code == 0, pinned.err
        assert pinned.json() == {
            "run_id": run_id,
            "deployment_name": None,
            "build_id": None,
            "behavior": None,
        }

        wrong_role, theirs, missing = await asyncio.gather(
            agentledger(settings, home, "approve", run_id, "--by", "x", "--role", "boss", "--json"),
            agentledger(settings, home, "status", run_id, "--tenant", globex, "--json"),
            agentledger(settings, home, "status", "run-nope", "--tenant", globex, "--json"),
        )
        assert "'approver'" in json_error(wrong_role, 5, "refused")
        json_error(theirs, 3, "not_found")
        json_error(missing, 3, "not_found")
        assert f"tenant '{acme}'" not in theirs.err  # the run id it was given, nothing more

        # A reader that closed its end before a byte was written: no traceback, no message.
        read, write = os.pipe()
        try:
            closed_pipe = agentledger(settings, home, "status", run_id, "--json", stdout=write)
            os.close(read)
            quiet = await closed_pipe
        finally:
            os.close(write)
        assert quiet.code == 141 and quiet.err == "", quiet.err
        # And as a shell pipeline reads it.
        head = await asyncio.to_thread(
            subprocess.run,
            f"{AGENTLEDGER} status {run_id} --json | head -2",
            shell=True,
            cwd=ROOT,
            env=cli_env(settings, home),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert head.returncode == 0 and head.stderr == "", head.stderr
        assert head.stdout.splitlines() == ["{", f'  "run_id": "{run_id}",']

        cancelled = await agentledger(settings, home, "cancel", run_id, "--json")
        assert cancelled.code == 0, cancelled.err
        assert cancelled.json()["run_id"] == run_id and "cancel" in cancelled.json()["message"]
        watched = await agentledger(settings, home, "watch", run_id, "--json")
        assert watched.code == 1, watched.err
        assert json.loads(watched.out.splitlines()[-1])["data"]["outcome"] == "cancelled"

    paused = await agentledger(settings, home, "pause", run_id, "--json")
    assert "already ended" in json_error(paused, 5, "refused")
    done = await agentledger(settings, home, "receipt", run_id, "--json")
    assert done.code == 0 and done.json()["outcome"] == "cancelled"


def leaves(p: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= leaves(child, f"{path} {name}".strip()) or {
                    f"{path} {name}".strip(): child
                }
    return found


def test_every_command_and_group_says_what_it_does_and_each_option_has_help():
    """`--help` of every command, groups included (`keys`, `eval`, `serve`, ...), opens with a
    description; `keys create --role` says what each role may do."""
    commands = leaves(parser())
    top = parser()
    groups = {
        name: p
        for a in top._actions
        if isinstance(a, argparse._SubParsersAction)
        for name, p in a.choices.items()
    }
    bare = [name for name, p in {**groups, **commands}.items() if not p.description]
    assert not bare, f"commands whose --help has no description: {bare}"
    silent = [
        f"{name} {a.option_strings[0] if a.option_strings else a.dest}"
        for name, p in commands.items()
        for a in p._actions
        if a.help is None and not isinstance(a, argparse._SubParsersAction)
    ]
    assert not silent, f"arguments whose --help says nothing: {silent}"
    [role] = [a for a in commands["keys create"]._actions if "--role" in a.option_strings]
    assert role.help and "approver" in role.help, role.help


def test_every_command_takes_json():
    commands = leaves(parser())
    assert {"cancel", "deploy", "up", "demo", "backlog enqueue", "approvers add"} <= set(commands)
    lacking = [
        name
        for name, p in commands.items()
        if not any("--json" in a.option_strings for a in p._actions)
    ]
    assert not lacking, f"commands without --json: {lacking}"


def test_commands_load_no_model_sdk_and_a_worker_no_mcp_client_it_was_not_given():
    """What a command needs to talk to Temporal and the mirror (the CLI, RunClient, the
    workflows it names) loads neither the `openai` SDK nor the MCP client: a third of a
    command's start-up once. A worker loads the MCP client only for a server it is given."""
    probe = (
        "import json, sys\n"
        "import agentledger.cli.main, agentledger.client.run_client, agentledger.client.runs\n"
        "import agentledger.workflows, agentledger.client.sessions, agentledger.client.backlogs\n"
        "client = [m for m in ('openai', 'mcp') if m in sys.modules]\n"
        "import agentledger.worker.main\n"
        "worker = [m for m in ('openai', 'mcp') if m in sys.modules]\n"
        "print(json.dumps({'client': client, 'worker': worker}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"client": [], "worker": ["openai"]}


def test_help_and_version_load_nothing_heavy():
    """`agentledger --help` builds every command's parser without temporalio, openai, mcp,
    psycopg or pydantic; `--version` comes from the package's metadata."""
    probe = (
        "import json, sys\n"
        "from agentledger.cli.main import main\n"
        "codes = [main(['--help']), main(['backlog', 'enqueue', '--help'])]\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: agentledger [-h] [--version]")
    assert "[--log-level {DEBUG,INFO,WARNING,ERROR,CRITICAL}]" in done.stdout
    assert json.loads(done.stdout.splitlines()[-1]) == {"codes": [0, 0], "heavy": []}
    shown = subprocess.run(
        [AGENTLEDGER, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout == f"agentledger {version('agentledger')}\n"
    as_module = subprocess.run(
        [sys.executable, "-m", "agentledger", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert as_module.stdout == shown.stdout


def complete_in_bash(script: str, *words: str) -> list[str]:
    """What bash's completion offers after `words` (the last one being completed)."""
    line = " ".join(words)
    program = (
        f"{script}\n"
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _agentledger\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completion_offers_commands_flags_and_choices():
    done = subprocess.run(
        [AGENTLEDGER, "completion", "bash"], capture_output=True, text=True, timeout=60, check=True
    )
    script = done.stdout
    assert "complete -o default -F _agentledger agentledger" in script
    assert complete_in_bash(script, "agentledger", "st") == ["start", "status", "stats", "standing"]
    assert complete_in_bash(script, "agentledger", "backlog", "re") == ["resume", "retry"]
    assert complete_in_bash(script, "agentledger", "list", "--status", "c") == [
        "completed",
        "cancelled",
    ]
    assert "--from-step" in complete_in_bash(script, "agentledger", "fork", "run-1", "--")
    assert complete_in_bash(script, "agentledger", "completion", "z") == ["zsh"]


def test_zsh_completion_is_a_completion_function():
    done = subprocess.run(
        [AGENTLEDGER, "completion", "zsh", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    script = json.loads(done.stdout)["script"]
    assert script.startswith("#compdef agentledger\n")
    assert "compdef _agentledger agentledger" in script and "compadd -- ${=choices}" in script
    assert '("/list --status") choices=' in script
    if shutil.which("zsh"):
        checked = subprocess.run(["zsh", "-n"], input=script, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
