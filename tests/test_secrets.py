"""Secrets never show in clear text: not in the mirror, the receipt, history or the logs.

One real run, with canary values for the worker's API key, a secret a tool returns, a secret
the model writes into an argument, and one a tool hides in its result: afterwards every table
of the mirror, the receipt (Markdown and JSON), the run's Temporal history and everything
logged or printed is searched for them. Markers must stand where the values would have been,
so the test cannot pass by the secrets never flowing.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import uuid
from typing import Any

import pytest
from psycopg import sql
from pydantic import BaseModel, SecretStr

from agentledger.activities.provider_clients import model_client
from agentledger.cli.render import receipt_markdown
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SecretUnavailable, ServiceUnreachable
from agentledger.core.results import RunResult
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from agentledger.store.db import open_pool
from agentledger.store.vault import MARKER, SecretScope, SecretVault
from agentledger.tools import Tool, ToolContext, ToolError, ToolRegistry
from agentledger.worker.worker_factory import WorkerDeps, build_worker
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import make_spec, rows

CANARY = uuid.uuid4().hex[:12]
API_KEY = f"sk-canary-apikey-{CANARY}"
TOKEN = f"tok-canary-result-{CANARY}"  # returned by a tool, marked with ctx.secret()
PASSWORD = f"pw-canary-argument-{CANARY}"  # written by the model into a secret argument
SESSION = f"sess-canary-field-{CANARY}"  # a result field the tool declares secret
CANARIES = {"API key": API_KEY, "token": TOKEN, "password": PASSWORD, "session": SESSION}


class AccountArgs(BaseModel):
    account: str


async def get_access_token(args: AccountArgs, ctx: ToolContext) -> dict[str, object]:
    """Fetch a token: the model sees its marker, never the token."""
    token = TOKEN
    marker = ctx.secret(token)  # from here on, the token is replaced wherever it goes
    await ctx.save_checkpoint({"last_token": token})  # a careless checkpoint, redacted
    ctx.heartbeat(f"fetched {token}")
    return {"account": args.account, "access_token": marker, "note": f"got {token}"}


class CallApiArgs(BaseModel):
    endpoint: str
    token: str
    password: str


async def call_api(args: CallApiArgs, ctx: ToolContext) -> dict[str, object]:
    """Uses the secrets behind the markers; echoes them, which the activity must redact."""
    if args.token != TOKEN or args.password != PASSWORD:
        raise ToolError(f"the API refused credentials {args.token!r} / {args.password!r}")
    logging.getLogger("tests.secrets").debug("calling %s", args.endpoint)
    return {
        "endpoint": args.endpoint,
        "authorized": True,
        "echo": f"authorized with {args.token} and {args.password}",
        "session": SESSION,
    }


class LeakyArgs(BaseModel):
    token: str


async def leaky(args: LeakyArgs, ctx: ToolContext) -> dict[str, object]:
    """Fails with the secret in its message: the failure that reaches history must not."""
    raise RuntimeError(f"upstream rejected token {args.token}")


class MessageArgs(BaseModel):
    body: str


async def post_note(args: MessageArgs, ctx: ToolContext) -> dict[str, object]:
    """Not a secret argument: a marker pasted here must reach the tool as a marker."""
    return {"posted": args.body, "opened": TOKEN in args.body}


def secret_registry() -> ToolRegistry:
    return ToolRegistry(
        [
            Tool("get_access_token", "Get an API token.", AccountArgs, get_access_token),
            Tool(
                "call_api",
                "Call the API with a token and the account password.",
                CallApiArgs,
                call_api,
                side_effect=True,
                secret_args=("token", "password"),
                secret_results=("session",),
            ),
            Tool("leaky", "Check a token.", LeakyArgs, leaky, secret_args=("token",)),
            Tool("post_note", "Post a note.", MessageArgs, post_note),
        ]
    )


def model(request: dict[str, Any]) -> Reply:
    """Fetches a token, uses its marker (and a password it knows) and answers with what it saw."""
    messages = request["messages"]
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    seen = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "tool")
    if turn == 0:
        return completion(request, tool_calls=[("get_access_token", {"account": "acme"})])
    if turn == 1:
        token = MARKER.search(seen)
        if token is None:  # the assertions on the mirror say what went wrong
            return completion(request, content=f"## Summary\nNo marker in: {seen}")
        return completion(
            request,
            tool_calls=[
                (
                    "call_api",
                    {"endpoint": "/v1/orders", "token": token.group(0), "password": PASSWORD},
                ),
                ("leaky", {"token": token.group(0)}),
                ("post_note", {"body": f"the token is {token.group(0)}"}),
            ],
        )
    return completion(request, content=f"## Summary\nCalled the API.\n\n## Results\n{seen}")


async def mirror_dump(pool: Any) -> dict[str, str]:
    """Every row of every table and view in the mirror's schema, as text."""
    tables = await rows(
        pool,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
    )
    dump = {}
    async with pool.connection() as conn:
        for t in sorted(r["table_name"] for r in tables):
            cur = await conn.execute(sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier(t)))
            dump[t] = "\n".join(r[0] for r in await cur.fetchall())
    return dump


def readable(history_json: str) -> str:
    """The history's JSON with every payload's data decoded: `to_json()` keeps it base64."""
    decoded: list[str] = [history_json]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("data"), str) and "metadata" in node:
                decoded.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(history_json))
    return "\n".join(decoded)


def leaks(text: str) -> list[str]:
    """The canaries found in `text`, as text or as hex (bytea columns print as hex)."""
    return [
        name for name, value in CANARIES.items() if value in text or value.encode().hex() in text
    ]


async def test_secrets_never_appear_in_clear_text(
    client, settings, pool, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
):
    caplog.set_level(logging.DEBUG)
    settings = settings.model_copy(update=dict(openai_api_key=SecretStr(API_KEY)))
    spec = make_spec(
        "Call the orders API for acme with its token.",
        failures={"tools": {"leaky": {"max_attempts": 1}}},
    )
    with OfflineModelServer(model) as server:
        openai_client = model_client(
            settings.model_copy(update=dict(openai_base_url=server.base_url))
        )
        assert openai_client.api_key == API_KEY  # the canary is the key the worker's calls carry
        deps = WorkerDeps(pool=pool, model_client=openai_client, registry=secret_registry())
        async with build_worker(client, settings, deps):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result: RunResult = await handle.result()
            history = readable((await handle.fetch_history()).to_json())
        requests = json.dumps(server.requests)
    run_id = started.run_id
    assert result.status.value == "completed", result.error

    # The secrets flowed: the tool got the real values behind the markers, and said so.
    steps = {
        s["name"]: s
        for s in await rows(
            pool,
            "SELECT name, status, input, output, error, checkpoint FROM steps "
            "WHERE run_id = %s AND type = 'tool_call'",
            run_id,
        )
    }
    fetched, called, failed, posted = (
        steps[n] for n in ("get_access_token", "call_api", "leaky", "post_note")
    )
    token_marker = fetched["output"]["access_token"]
    assert MARKER.fullmatch(token_marker)
    assert fetched["output"]["note"] == f"got {token_marker}"
    assert fetched["checkpoint"]["last_token"] == token_marker
    assert called["status"] == "completed" and called["output"]["authorized"] is True
    assert called["input"]["token"] == token_marker
    password_marker = called["input"]["password"]
    assert MARKER.fullmatch(password_marker) and password_marker != token_marker
    assert called["output"]["echo"] == f"authorized with {token_marker} and {password_marker}"
    assert MARKER.fullmatch(called["output"]["session"])
    assert failed["status"] == "failed" and token_marker in failed["error"]
    # A marker outside a declared secret argument is not opened for the tool.
    assert posted["output"] == {"posted": f"the token is {token_marker}", "opened": False}
    ledger = await rows(pool, "SELECT result FROM tool_ledger WHERE run_id = %s", run_id)
    assert ledger[0]["result"]["echo"] == called["output"]["echo"]
    sealed = await rows(pool, "SELECT count(*) AS n FROM secret_values WHERE run_id = %s", run_id)
    assert sealed[0]["n"] >= 3  # token, password, session

    # Where the values would have been, markers are.
    receipt = await ops.receipt(pool, run_id)
    side_effect = receipt["side_effects"][0]
    assert side_effect["arguments"]["password"] == password_marker
    assert side_effect["output"]["session"] == called["output"]["session"]
    markdown = receipt_markdown(receipt)
    receipt_json = json.dumps(receipt, default=str)
    assert token_marker in (receipt.get("answer") or "")
    assert token_marker in history and password_marker in history
    assert token_marker in requests  # the model worked with the marker...
    logged = caplog.text
    assert token_marker in logged  # the activity failure was logged, redacted

    # ...and nowhere is there a secret in clear text.
    dump = await mirror_dump(pool)
    assert {"runs", "steps", "tool_ledger", "receipts", "secret_values"} <= set(dump)
    places = {f"mirror table {t}": text for t, text in dump.items()} | {
        "receipt (Markdown)": markdown,
        "receipt (JSON)": receipt_json,
        "Temporal history": history,
        "requests to the model provider": requests,
        "logs": logged,
        "printed output": "".join(capfd.readouterr()),
    }
    found = {place: leaks(text) for place, text in places.items() if leaks(text)}
    assert not found, f"secrets in clear text: {found}"


def test_settings_never_show_their_secrets():
    key = os.urandom(32)
    env = {
        "OPENAI_API_KEY": API_KEY,
        "DATABASE_URL": f"postgresql://agent:{PASSWORD}@db.internal/agentledger",
        "AGENTLEDGER_ENCRYPTION_KEYS": "k1:" + base64.b64encode(key).decode(),
    }
    settings = AgentLedgerConfig.load(env)
    assert settings.openai_api_key.get_secret_value() == API_KEY
    assert settings.encryption_key_material() == {"k1": key}
    for shown in (repr(settings), str(settings), f"{settings}"):
        assert API_KEY not in shown and PASSWORD not in shown
        assert base64.b64encode(key).decode() not in shown and repr(key) not in shown


async def test_an_unreachable_database_error_hides_its_password():
    url = f"postgresql://agent:{PASSWORD}@127.0.0.1:9/agentledger?connect_timeout=1"
    with pytest.raises(ServiceUnreachable) as raised:
        await open_pool(url, connect_seconds=1)
    assert PASSWORD not in str(raised.value) and "agent:***@127.0.0.1" in str(raised.value)


async def test_a_secret_opens_only_in_its_run_and_under_its_key(pool):
    run_id = f"vault-{uuid.uuid4().hex[:8]}"
    scope = SecretScope()
    stand_in = scope.mark(TOKEN)
    assert scope.redact({"t": [f"x{TOKEN}y"]}) == {"t": [f"x{stand_in}y"]}
    matched = MARKER.fullmatch(stand_in)
    assert matched is not None
    secret_id = matched.group(1)
    keys = {"k1": os.urandom(32)}
    await SecretVault(pool, keys).seal(run_id, scope)
    stored = await rows(pool, "SELECT sealed FROM secret_values WHERE run_id = %s", run_id)
    assert TOKEN.encode() not in bytes(stored[0]["sealed"])

    # Another worker with the same keys opens it; only for its own run.
    assert await SecretVault(pool, keys).open(run_id, [secret_id]) == {secret_id: TOKEN}
    with pytest.raises(SecretUnavailable, match="not a secret of this run"):
        await SecretVault(pool, keys).open("another-run", [secret_id])
    # A worker without the key says what to do, and never what the secret is.
    with pytest.raises(SecretUnavailable, match="AGENTLEDGER_ENCRYPTION_KEYS") as raised:
        await SecretVault(pool).open(run_id, [secret_id])
    assert TOKEN not in str(raised.value)
    with pytest.raises(SecretUnavailable, match="does not decrypt"):
        await SecretVault(pool, {"k1": os.urandom(32)}).open(run_id, [secret_id])
