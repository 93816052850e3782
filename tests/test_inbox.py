"""The approvals inbox in a real browser, at a phone's width: log in with a key, see the
pending refund-like action (arguments, risk, who asked, expiry), edit it and approve it, and
follow the run's timeline to its receipt, which names the key as approver and the edit.

Headless Chromium (Debian's `chromium`) driven by Playwright, as tests/test_web_ui.py does;
skipped with the reason when either is missing. The server is `agentledger serve` in a
subprocess, on the real stack.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel
from temporalio.client import Client

import agentledger.demo
from agentledger import RunClient, ToolContext, ToolRegistry, tool
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.notifications import inbox_item
from tests import client_ops as ops
from tests.http_support import bearer, make_key, served
from tests.support import NOTIFY_TASK, eventually, rows, wait_pending
from tests.test_http import eventually_receipt

CHROMIUM = os.environ.get("AGENTLEDGER_CHROMIUM", "/usr/bin/chromium")
playwright = pytest.importorskip(
    "playwright.async_api",
    reason="playwright is not installed: it is the browser extra, `pip install -e '.[browser]'`",
)
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Chromium at {CHROMIUM}: `apt-get install chromium` (or set AGENTLEDGER_CHROMIUM)",
)
from tests.test_web_ui import CHROMIUM_ARGS  # noqa: E402

PHONE = {"width": 390, "height": 844}
# Markup in a run's task and arguments is shown as text, never run.
HOSTILE = ' <img src=x onerror="document.title=1">'


async def test_an_approver_edits_and_approves_in_the_inbox_from_a_phone(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    by = "key:" + approver.split("_")[1]
    edit = {"body": "Your refund of $120 is approved; it is paid within 5 days."}
    async with worker(), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs",
                json={"task": NOTIFY_TASK + HOSTILE, "user": "li@example.com"},
                headers={**bearer(runner), "Idempotency-Key": "refund-1"},
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            pending = await wait_pending(client, run_id, seconds=60)

            async def listed() -> list[str]:
                """The inbox's runs: the mirror's, written a moment after the run asks."""
                answer = await http.get("/v1/approvals", headers=bearer(runner))
                assert answer.status_code == 200, answer.text
                return [item["run_id"] for item in answer.json()]

            assert await eventually(listed, what="the inbox to list the run") == [run_id]
            assert (await http.get("/v1/approvals")).status_code == 401

        async with playwright.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport=PHONE)
                console: list[str] = []
                page.on("console", lambda message: console.append(message.text))
                await page.goto(f"{door.url}/inbox")
                await page.fill("#key", approver)
                await page.click("button[type=submit]")
                card = page.locator(f"article.card[data-run='{run_id}']")
                await card.wait_for(timeout=30_000)
                shown = await card.inner_text()
                assert "Run send_message" in shown and "high" in shown
                assert "li@example.com" in shown and pending.arguments["to"] in shown
                assert "Expires" in shown and HOSTILE.strip() in shown
                assert await card.locator("img").count() == 0
                # The page fits a phone: nothing wider than the screen.
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= PHONE["width"], width

                await card.locator(".toggle-edit").click()
                edited = {**pending.arguments, **edit}
                await card.locator("textarea.edit").fill(json.dumps(edited, indent=2))
                await card.locator("button.approve").click()
                receipt_line = card.locator(".timeline li.receipt")
                await receipt_line.wait_for(timeout=60_000)
                told = await receipt_line.inner_text()
                assert "completed" in told and f"approved by {by}" in told, told
                assert await card.locator("h2").inner_text() == "Run send_message · approved"
                assert await card.locator("button.approve").is_disabled()
                assert json.dumps(edit, separators=(",", ":")) in told, told
                assert await page.evaluate("sessionStorage.getItem('agentledger.key')") == approver
                # The page's own script and styles are all its policy lets run, and all run.
                assert not [m for m in console if "Content Security Policy" in m], console
            finally:
                await browser.close()

    receipt = await ops.receipt(pool, run_id)  # the page showed it: it is written
    [approval] = receipt["approvals"]
    # The box's arguments replaced the proposed ones; the receipt keeps them and the change.
    assert (approval["by"], approval["edit_kind"]) == (by, "replace")
    assert approval["edit"] == edited and approval["diff"] == edit
    assert approval["final_arguments"]["body"] == edit["body"]
    sent = await rows(pool, "SELECT body FROM outbox WHERE run_id = %s", run_id)
    assert sent == [{"body": edit["body"]}]


class MailArgs(BaseModel):
    to: str
    subject: str
    body: str
    bcc: str | None = None


@tool(risk="high", description="Send an email; a copy goes to `bcc` if given.")
async def send_mail(args: MailArgs, ctx: ToolContext) -> dict[str, object]:
    return {"sent_to": args.to, "bcc": args.bcc}


async def test_a_field_the_approver_removes_in_the_inbox_is_not_sent(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    """The approver takes `bcc` out of the box: the page sends exactly what is left, says
    "Approved" only once the run applied it, the tool runs without `bcc`, and the receipt
    keeps the arguments before and after and the difference."""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver", name="maria (refunds)")
    proposed = {
        "to": "ana@example.com",
        "subject": "Your refund",
        "body": "It is approved.",
        "bcc": "mallory@evil.example",
    }
    async with RunClient.lazy(settings) as operator:
        await operator.tenants.set_policy(tenant, {"free_form": "runner"})
    registry = ToolRegistry([*agentledger.demo.registry.tools(), send_mail])
    async with worker(registry=registry), served(settings, tmp_path) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            started = await http.post(
                "/v1/runs",
                json={"task": f"call send_mail {json.dumps(proposed)}"},
                headers=bearer(runner),
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            pending = await wait_pending(client, run_id, seconds=60)
            assert pending.arguments == proposed
        kept = {k: v for k, v in proposed.items() if k != "bcc"}
        async with playwright.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport=PHONE)
                await page.goto(f"{door.url}/inbox")
                # The login page says where a key comes from.
                assert "agentledger keys create" in await page.locator("#get-key").inner_text()
                await page.fill("#key", approver)
                await page.click("button[type=submit]")
                card = page.locator(f"article.card[data-run='{run_id}']")
                await card.wait_for(timeout=30_000)
                signed_in = await page.locator("#signed-in").inner_text()
                assert "maria (refunds)" in signed_in and tenant in signed_in, signed_in
                assert await page.locator("#get-key").is_hidden()
                await card.locator(".toggle-edit").click()
                await card.locator("textarea.edit").fill(json.dumps(kept, indent=2))
                # What the edit changes shows before anything is sent.
                diff = await card.locator(".diff").inner_text()
                assert 'bcc: removed (was "mallory@evil.example")' in diff, diff
                await card.locator("button.approve").click()
                status = page.locator("#status", has_text="send_mail")
                await status.wait_for(timeout=60_000)
                assert (await status.inner_text()).startswith("Approved send_mail")
                assert await card.locator("h2").inner_text() == "Run send_mail · approved"
                decided = card.locator(".decided", has_text="removed")
                await decided.wait_for(timeout=60_000)
                told = await decided.inner_text()
                assert told.startswith("Approved by maria (refunds) at "), told
                # Nothing stands above the decided card to say nothing waits.
                empty = page.locator("#empty")
                await empty.wait_for(timeout=10_000)
                assert await empty.inner_text() == "Nothing else waits for a decision."
                assert await page.evaluate(
                    "Boolean($('cards').compareDocumentPosition($('empty')) & 4)"
                )
            finally:
                await browser.close()
    receipt = await eventually_receipt(pool, run_id)
    [approval] = receipt["approvals"]
    assert approval["proposed_arguments"] == proposed
    assert approval["final_arguments"] == approval["edit"] == kept
    assert approval["diff"] == {"bcc": None}
    assert approval["by"] == "maria (refunds)"
    ran = await rows(
        pool,
        "SELECT input FROM steps WHERE run_id = %s AND type = 'tool_call' AND name = 'send_mail'",
        run_id,
    )
    assert ran == [{"input": kept}], "the tool ran with what the approver left"


REFUND_TASK = (
    'Refund order 42: call look_up_order {"order_id": 42} '
    'call refund_order {"order_id": 42, "cents": CENTS}'
)


async def start_refund(http: httpx.AsyncClient, key: str, cents: int) -> str:
    started = await http.post(
        "/v1/runs", json={"task": REFUND_TASK.replace("CENTS", str(cents))}, headers=bearer(key)
    )
    assert started.status_code == 201, started.text
    run_id: str = started.json()["run_id"]
    return run_id


async def test_an_approver_reads_a_refund_edits_it_and_grants_a_standing_approval(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    """The story an approver meets at a desk: the refund reads as "Refund $19.99 on order
    42", with its arguments as a table, what the run looked up first and the model's stated
    reason, who asked and when it expires; she edits the amount (the diff shows first) and
    approves; the card and the receipt name her and the edit. Then she grants "refunds up
    to $20 for an hour": a $15 refund completes without a card (its receipt names the rule),
    a $25 one waits; revoked, a third $15 refund waits again."""
    tenant = f"t{uuid.uuid4().hex[:8]}"
    runner = await make_key(settings, tenant, "runner", name="desk bot")
    approver = await make_key(settings, tenant, "approver", name="maria (refunds)")
    async with RunClient.lazy(settings) as operator:
        await operator.tenants.set_policy(tenant, {"standing_tools": ["refund_order"]})
    # The operator's only agent, so every start runs it: it looks orders up and refunds.
    profiles = tmp_path / "agents.yaml"
    refunds = {"instructions": "You refund orders.", "tools": ["look_up_order", "refund_order"]}
    profiles.write_text(json.dumps({"refunds": refunds}))
    env = {"AGENTLEDGER_AGENTS": str(profiles)}
    async with worker(), served(settings, tmp_path, env=env) as door:
        async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
            run_id = await start_refund(http, runner, 1999)
            pending = await wait_pending(client, run_id, seconds=60)
        async with playwright.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                # As a notification links to it: the inbox opens at the approval's card.
                await page.goto(door.url + inbox_item(run_id, pending.approval_id))
                await page.fill("#key", approver)
                await page.click("button[type=submit]")
                card = page.locator(f"article.card[data-run='{run_id}']")
                await card.wait_for(timeout=30_000)
                assert await card.evaluate("c => c.classList.contains('linked')")
                assert await card.evaluate("c => document.activeElement === c")
                assert await card.locator("h2").inner_text() == "Refund $19.99 on order 42"
                table = await card.locator("table.args").inner_text()
                assert "cents\t1999" in table and "order_id\t42" in table, table
                assert await card.locator("pre.arguments").is_hidden()  # JSON behind a toggle
                evidence = await card.locator(".evidence").inner_text()
                assert "look_up_order" in evidence and "desk lamp" in evidence, evidence
                assert "The task asks me to call refund_order" in evidence, evidence
                shown = await card.inner_text()
                assert "desk bot (key)" in shown and "high" in shown, shown

                await card.locator(".toggle-edit").click()
                edited = {"order_id": 42, "cents": 1500}
                await card.locator("textarea.edit").fill(json.dumps(edited))
                assert await card.locator(".diff").inner_text() == "cents: 1999 → 1500"
                await card.locator("button.approve").click()
                decided = card.locator(".decided", has_text="changed")
                await decided.wait_for(timeout=60_000)
                told = await decided.inner_text()
                assert told.startswith("Approved by maria (refunds) at "), told
                assert told.endswith("changed cents: 1999 → 1500"), told
                # The run's timeline reads as words, not event JSON.
                await card.locator(".timeline li.receipt").wait_for(timeout=60_000)
                timeline = await card.locator(".timeline").inner_text()
                assert "Asked for approval: Refund $19.99 on order 42" in timeline, timeline
                assert "Approved by maria (refunds)" in timeline, timeline
                receipt = await eventually_receipt(pool, run_id)
                [approval] = receipt["approvals"]
                assert (approval["by"], approval["diff"]) == ("maria (refunds)", {"cents": 1500})
                assert approval["summary"] == "Refund $19.99 on order 42"

                # Then a standing approval: refunds up to $20, for an hour.
                await card.locator(".allow").click()
                assert await page.locator("#grant-tool").input_value() == "refund_order"
                await page.fill("#grant-when", "cents <= 2000")
                await page.fill("#grant-hours", "1")
                await page.click("#grant button[type=submit]")
                rule = page.locator("#rules li", has_text="refund_order when cents <= 2000")
                await rule.wait_for(timeout=30_000)
                assert "granted by maria (refunds)" in await rule.inner_text()
                rule_id = await rule.get_attribute("data-rule")
                async with httpx.AsyncClient(base_url=door.url, timeout=60) as http:
                    covered = await start_refund(http, runner, 1500)
                    over = await start_refund(http, runner, 2500)
                    covered_receipt = await eventually_receipt(pool, covered)
                    await wait_pending(client, over, seconds=60)
                    await page.click("#refresh")
                    await page.locator(f"article.card[data-run='{over}']").wait_for()
                    assert await page.locator(f"article.card[data-run='{covered}']").count() == 0
                    # Revoked in the inbox: the same $15 refund asks a person again.
                    await rule.locator("button.revoke").click()
                    await rule.wait_for(state="detached", timeout=30_000)
                    third = await start_refund(http, runner, 1500)
                    await wait_pending(client, third, seconds=60)
            finally:
                await browser.close()
    [by_rule] = covered_receipt["approvals"]
    assert by_rule["decision"] == "approved" and by_rule["by"] == "maria (refunds)", by_rule
    assert by_rule["standing_rule"] == f"{rule_id}: refund_order when cents <= 2000", by_rule
    paid = await rows(
        pool, "SELECT run_id, cents FROM refunds WHERE run_id = ANY(%s)", [run_id, covered]
    )
    assert sorted(p["cents"] for p in paid) == [1500, 1500]
    for waiting in (over, third):
        await client.get_workflow_handle(waiting).cancel()
