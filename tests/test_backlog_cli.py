"""`starter.py backlog ...` end to end, and the backlog file format with its error messages."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentledger.core.errors import OperationError
from tests import client_ops as bops
from tests.backlog_support import FAST_TIMEOUTS, end_backlog, new_agent, wait_states
from tests.test_cli import run_cli

GOOD = """\
# Tonight's backlog
- title: Order policy
  idempotency_key: order-policy
  spec: {task: "Summarize the order policy.", allowed_tools: [search_notes], timeouts: TIMEOUTS}
- title: Never passes
  idempotency_key: poison
  max_attempts: 1
  spec:
    task: "Summarize the invoice policy."
    allowed_tools: [search_notes]
    verify: {required_sections: ["## Never there"], max_rounds: 1}
    timeouts: TIMEOUTS
""".replace("TIMEOUTS", json.dumps(FAST_TIMEOUTS))


@pytest.fixture
def cli(settings, tmp_path):
    async def call(*args: str):
        return await run_cli(settings, tmp_path / "agentledger-home", *args)

    return call


def refused(result, code: int = 2) -> str:
    """A refusal: its exit code (docs/using.md "Exit codes") and an `error: ...` message on stderr,
    no traceback."""
    assert result.code == code, (result.code, result.out, result.err)
    assert result.err.startswith("error: ") and "Traceback" not in result.err, result.err
    return result.err


async def test_cli_enqueues_lists_and_dead_letters(cli, client, pool, worker, tmp_path):
    agent = new_agent("cli")
    plan = tmp_path / "backlog.yaml"
    plan.write_text(GOOD)
    broken = tmp_path / "broken.yaml"
    broken.write_text(GOOD.replace("  idempotency_key: poison\n", ""))

    malformed, unknown = await asyncio.gather(
        cli("backlog", "enqueue", "--agent", agent, str(broken)),
        cli("backlog", "stop", "--agent", agent),
    )
    message = refused(malformed)
    assert "task 2 (line 5)" in message and "idempotency_key: Field required" in message
    assert f"agent {agent} has no backlog" in refused(unknown, 3)
    try:
        async with worker():
            first = await cli(
                "backlog", "enqueue", "--agent", agent, str(plan), "--retry-delay", "0", "--json"
            )
            assert first.code == 0, first.err
            assert first.json()["added"] == ["order-policy", "poison"]
            again = await cli("backlog", "enqueue", "--agent", agent, str(plan))
            assert again.code == 0, again.err
            assert "added 0, ignored 2" in again.out
            await wait_states(pool, agent, {"order-policy": "done", "poison": "failed"})

            listed, dead, retry_done = await asyncio.gather(
                cli("backlog", "list", "--agent", agent, "--json"),
                cli("backlog", "dead", "--agent", agent),
                cli("backlog", "retry", "--agent", agent, "order-policy"),
            )
    finally:
        await end_backlog(client, agent)

    assert listed.code == 0, listed.err
    listing = listed.json()
    assert listing["status"] == "active"
    assert [(t["ordinal"], t["task_key"], t["state"], t["attempts"]) for t in listing["tasks"]] == [
        (1, "order-policy", "done", 0),
        (2, "poison", "failed", 1),
    ]
    assert listing["tasks"][0]["run_status"] == "completed"
    assert "verification failed" in listing["tasks"][1]["last_error"]
    assert dead.code == 0, dead.err
    assert "poison" in dead.out and "verification failed" in dead.out
    assert "order-policy" not in dead.out
    assert "only failed tasks" in refused(retry_done, 5)


def test_backlog_files_accept_json_yaml_and_shorthands(tmp_path):
    as_json = tmp_path / "plan.json"
    as_json.write_text(
        json.dumps(
            [
                {"title": "Refunds", "idempotency_key": "r1", "spec": "Summarize refunds."},
                {"title": "Summarize the outage notes.", "idempotency_key": "o1"},
                {"title": "Orders", "idempotency_key": "x/1", "spec": {"task": "Orders."}},
            ]
        )
    )
    tasks = bops.load_tasks(as_json)
    assert [(t.idempotency_key, t.spec.task) for t in tasks] == [
        ("r1", "Summarize refunds."),
        ("o1", "Summarize the outage notes."),
        ("x/1", "Orders."),
    ]
    wrapped = tmp_path / "wrapped.yaml"
    wrapped.write_text("tasks:\n  - {title: A, idempotency_key: a}\n")
    assert [t.idempotency_key for t in bops.load_tasks(wrapped)] == ["a"]


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("[]", "non-empty list of tasks"),
        ("title: A\n", "non-empty list of tasks"),
        ("- [1, 2]\n", "task 1 (line 1): a task is a mapping"),
        (
            "- {title: A, idempotency_key: a}\n- {title: B, idempotency_key: a}\n",
            "task 2 (line 2): idempotency_key 'a' is already used by task 1",
        ),
        (
            "- title: A\n  idempotency_key: a\n  spec: {task: A, idempotency_key: z}\n",
            "task 1 (line 1): spec: Value error, spec.idempotency_key is set by the backlog",
        ),
        (
            "- {title: A, idempotency_key: a}\n- title: B\n  idempotency_key: b\n"
            "  spec: {task: B, colour: blue}\n",
            "task 2 (line 2): spec.colour: Extra inputs are not permitted",
        ),
        ("[{title: A, idempotency_key: a}\n", "is not valid JSON or YAML"),
    ],
)
def test_backlog_files_with_faults_name_the_task_line_and_field(tmp_path, text, fault):
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    with pytest.raises(OperationError) as refusal:
        bops.load_tasks(path)
    assert fault in str(refusal.value)
