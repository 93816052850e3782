"""The run inspector in the inbox's page, in a real browser: a runner lists the tenant's runs
(filtered), reads a finished run's steps as a timeline with each step's cost, re-runs it
from step 2 with an edited output (bad JSON refused before anything is sent), and follows
the fork live until it completes with the edit; an admin sees the cost per day as a chart
with a table beside it; a viewer reads the same run and is offered no fork. A task carrying
markup is shown as text everywhere.

Headless Chromium (Debian's `chromium`) driven by Playwright, as tests/test_inbox.py does;
the server is `agentledger serve` in a subprocess, on the real stack.
`AGENTLEDGER_SCREENSHOTS=1` also writes the screenshots the docs show (docs/inspector-*.png,
docs/runs-*.png).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger.core.config import AgentLedgerConfig
from tests import test_web_ui
from tests.http_support import bearer, make_key, served, tenant_name
from tests.support import NOTIFY_TASK, wait_pending
from tests.test_cli import ROOT
from tests.test_http import eventually_receipt
from tests.test_web_ui import CHROMIUM, CHROMIUM_ARGS, playwright

# A browser's test, skipped as tests/test_web_ui.py is without Playwright or Chromium.
pytestmark = test_web_ui.pytestmark

DESK = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
# Markup in a run's task (and so in its tool's arguments) is shown as text, never run.
HOSTILE = ' <img src=x onerror="document.title=1"><script>document.title=2</script>'
EDITED = {"query": "refund", "matches": ["Refunds are instant (edited in the inspector)."]}
SCREENSHOTS = os.environ.get("AGENTLEDGER_SCREENSHOTS") == "1"


async def shoot(page: Any, name: str) -> None:
    """The page at a desk's width and at a phone's, for the docs (when asked for)."""
    if not SCREENSHOTS:
        return
    for label, size in (("1280", DESK), ("390", PHONE)):
        await page.set_viewport_size(size)
        await page.screenshot(path=str(ROOT / "docs" / f"{name}-{label}.png"), full_page=True)
    await page.set_viewport_size(DESK)


async def sign_in(page: Any, url: str, key: str) -> None:
    await page.goto(url)
    await page.fill("#key", key)
    await page.click("#login button[type=submit]")
    await page.locator("#inspector").wait_for(timeout=30_000)


async def fits_a_phone(page: Any) -> None:
    await page.set_viewport_size(PHONE)
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    await page.set_viewport_size(DESK)


async def test_a_runner_forks_a_run_from_its_timeline_and_a_viewer_only_reads_it(
    settings: AgentLedgerConfig,
    pool: AsyncConnectionPool,
    client: Client,
    worker: Any,
    tmp_path: Path,
) -> None:
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner", name="desk bot")
    approver = await make_key(settings, tenant, "approver", name="maria (refunds)")
    admin = await make_key(settings, tenant, "admin", name="ops")
    viewer = await make_key(settings, tenant, "viewer", name="auditor")
    async with worker(), served(settings, tmp_path) as door:
        http = httpx.AsyncClient(base_url=door.url, timeout=60)

        async def approve(run_id: str) -> None:
            await wait_pending(client, run_id, seconds=60)
            decided = await http.post(
                f"/v1/runs/{run_id}/approve", json={}, headers=bearer(approver)
            )
            assert decided.status_code == 200, decided.text

        async with http:
            started = await http.post(
                "/v1/runs",
                json={"task": NOTIFY_TASK + HOSTILE, "user": "li@example.com"},
                headers=bearer(runner),
            )
            assert started.status_code == 201, started.text
            run_id = started.json()["run_id"]
            await approve(run_id)
            receipt = await eventually_receipt(pool, run_id)

            # The timeline over HTTP: every step in order, each with its cost, the costs
            # adding up to the receipt's; the approval names who decided.
            steps = (await http.get(f"/v1/runs/{run_id}/steps", headers=bearer(viewer))).json()
            assert [s["seq"] for s in steps] == list(range(1, len(steps) + 1))
            assert (steps[1]["type"], steps[1]["name"]) == ("tool_call", "search_notes")
            assert sum(s["cost_usd"] for s in steps) == pytest.approx(receipt["cost_usd"], abs=1e-5)
            assert steps[0]["cost_usd"] > 0 and steps[0]["tokens_in"] > 0
            [decided] = [s for s in steps if s["type"] == "approval"]
            assert decided["output"]["by"] == "maria (refunds)", decided
            # The list's filters: an agent, a status, a time.
            agent = receipt["agent"]
            for query, listed in (
                ({"agent": agent, "since_hours": 1}, [run_id]),
                ({"agent": "no-such-agent"}, []),
                ({"status": "failed"}, []),
            ):
                found = await http.get("/v1/runs", params=query, headers=bearer(viewer))
                assert [r["run_id"] for r in found.json()] == listed, (query, found.text)

            async with playwright.async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    page = await browser.new_page(viewport=DESK)
                    console: list[str] = []
                    page.on("console", lambda message: console.append(message.text))
                    page.on("pageerror", lambda error: console.append(f"uncaught: {error}"))
                    await sign_in(page, f"{door.url}/inbox#runs", runner)
                    row = page.locator(f"#run-list li[data-run='{run_id}']")
                    await row.wait_for(timeout=30_000)
                    shown = await row.inner_text()
                    assert HOSTILE.strip() in shown and "completed" in shown, shown
                    assert agent in shown, shown
                    assert await page.locator("#inspector img, #inspector script").count() == 0

                    # Filtered by status: the run is among the completed, not the failed.
                    await page.select_option("#filter-status", "failed")
                    await page.click("#run-filters button[type=submit]")
                    await page.locator("#runs-empty").wait_for(timeout=30_000)
                    assert await row.count() == 0
                    await page.select_option("#filter-status", "completed")
                    await page.fill("#filter-agent", agent)
                    await page.click("#run-filters button[type=submit]")
                    await row.wait_for(timeout=30_000)
                    assert "status=completed" in page.url

                    # To the run's page by keyboard: a link, then Enter.
                    await row.locator("a").focus()
                    await page.keyboard.press("Enter")
                    step = page.locator("#steps li.step")
                    await step.nth(len(steps) - 1).wait_for(timeout=30_000)
                    timeline = await page.locator("#steps").inner_text()
                    assert "Model turn" in timeline and "Tool call · search_notes" in timeline
                    # Each step's tokens and cost, as the mirror holds them.
                    first = await step.nth(0).locator(".step-meta").inner_text()
                    assert f"{steps[0]['tokens_in']} tokens in" in first, first
                    assert f"cost ${steps[0]['cost_usd']:.6f}" in first, first
                    assert "Approved" in timeline and "by maria (refunds)" in timeline
                    assert '"matches"' in timeline  # the tool's result
                    assert "Held: has section '## Summary'" in timeline  # the checks
                    await page.locator("#run-receipt", has_text="completed").wait_for()
                    assert await page.title() == "agentledger · run"
                    assert await page.locator("#inspector img, #inspector script").count() == 0
                    await fits_a_phone(page)
                    await shoot(page, "inspector")

                    # Re-run from step 2, first with JSON that is not: nothing is sent.
                    second = step.nth(1)
                    await second.locator("button.fork-open").click()
                    box = second.locator("textarea.fork-output")
                    assert json.loads(await box.input_value())["query"].startswith("Look up")
                    await box.fill('{"matches": [')
                    await second.locator("button.fork-send").click()
                    error = await second.locator(".fork-error").inner_text()
                    assert error.startswith("Not valid JSON, nothing was sent"), error
                    assert page.url.endswith(f"#runs/{run_id}")
                    await box.fill(json.dumps(EDITED))
                    await second.locator("button.fork-send").click()
                    await page.wait_for_url(
                        lambda url: url.split("#runs/")[-1] != run_id, timeout=30_000
                    )
                    fork_id = page.url.split("#runs/")[1]
                    # The fork runs live: its send waits for a person, then it completes.
                    await approve(fork_id)
                    ended = page.locator("#run-live", has_text="Ended: completed")
                    await ended.wait_for(timeout=90_000)
                    answer = await page.locator("#run-receipt pre.answer").inner_text()
                    assert EDITED["matches"][0] in answer, answer
                    assert EDITED["matches"][0] in await step.nth(1).inner_text()
                    forked = await page.locator("#run-receipt").inner_text()
                    assert f"{run_id} at step 2" in forked, forked
                    # The page's own script and styles are all its policy lets run, and all
                    # run without an error.
                    assert not [m for m in console if "Content Security" in m or "uncaught" in m]

                    # An admin sees the cost per day: a bar a day, a table beside it.
                    await page.click("#logout")
                    await sign_in(page, f"{door.url}/inbox#runs", admin)
                    await page.locator("#costs-chart rect").nth(13).wait_for(timeout=30_000)
                    chart = await page.locator("#costs-chart").inner_html()
                    assert "Day (UTC)" in chart and "Cost (USD)" in chart
                    table = page.locator("#costs-table tbody tr")
                    assert await table.count() == 14
                    # Today's row (yesterday's, for a test run across midnight UTC).
                    cells = [await tr.locator("td").all_text_contents() for tr in await table.all()]
                    paid = [(cost, calls) for cost, calls, _ in cells if int(calls) > 0]
                    assert len(paid) in (1, 2) and all(c.startswith("$0.000") for c, _ in paid)
                    await fits_a_phone(page)
                    await shoot(page, "runs")

                    # A viewer reads the run and is offered no fork, nor the costs.
                    await page.click("#logout")
                    await sign_in(page, f"{door.url}/inbox#runs/{run_id}", viewer)
                    await step.nth(len(steps) - 1).wait_for(timeout=30_000)
                    assert await page.locator("button.fork-open").count() == len(steps)
                    assert await page.locator("button.fork-open:visible").count() == 0
                    await page.click("#back-to-runs")
                    await page.locator("#costs-note", has_text="admin").wait_for()
                    assert await page.locator("#costs-chart").is_hidden()
                    # A run that is not the tenant's is refused once, and said so.
                    await page.goto(f"{door.url}/inbox#runs/{run_id}-x")
                    refused = page.locator("#run-live", has_text="Not following the run")
                    await refused.wait_for(timeout=30_000)
                    assert "no run" in (await refused.inner_text()).lower()
                finally:
                    await browser.close()
    fork_receipt = await eventually_receipt(pool, fork_id)
    assert fork_receipt["forked_from"]["from_step"] == 2
    assert fork_receipt["forked_from"]["edit_output"] == EDITED
