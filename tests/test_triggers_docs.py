"""docs/triggers.md's walkthroughs, run as written, in order, on a stack of their own
(`agentledger up` with its HTTP door, as tests/test_doc_examples.py starts it): each block
as one bash script (its lines share variables), the page's port 8321 being the one this
stack's door took; then what the page says happened did: the schedule's fire ran to its end
under its tenant, the signed delivery started its run (once), the session took its message,
and the budgets and costs read back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import eventually
from tests.test_doc_examples import bash_blocks, shell, stack_env

PAGE = "docs/triggers.md"
__all__ = ["stack_env"]  # the fixture, shared


async def json_of(line: str, env: dict[str, str]) -> Any:
    code, out = await shell(line, env)
    assert code == 0, f"`{line}` exited {code}:\n{out}"
    return json.loads(out)


@pytest.mark.timeout(600)
async def test_every_block_of_the_triggers_page_runs_as_written(
    stack_env: dict[str, str],
) -> None:
    port = stack_env["AGENTLEDGER_HTTP_PORT"]
    blocks = bash_blocks(PAGE)
    assert len(blocks) == 5
    said = []
    for block in blocks:
        code, out = await shell(
            "set -e\n" + block.replace("localhost:8321", f"localhost:{port}"), stack_env
        )
        assert code == 0, f"{PAGE} exited {code}:\n{block}\n{out}"
        said.append(out)
    # curl's answer, then (on the same line: it ends with no newline) `hooks list`'s table.
    hook, _ = json.JSONDecoder().raw_decode(said[2][said[2].index("{") :])
    assert hook == {
        "run_id": "run-acme~hook.issues.72d3162e",
        "existing": False,
        "delivery_id": "72d3162e",
    }
    assert "issues" in said[2] and "Triage this issue" in said[2]

    async def ended() -> dict[str, Any] | None:
        runs = await json_of("agentledger list --tenant acme --limit 100 --json", stack_env)
        mine = {r["run_id"]: r["status"] for r in runs}
        fired = [r for r in mine if r.startswith("run-~schedule.acme~digest@")]
        done = mine.get(hook["run_id"]) == "completed" and fired and mine[fired[0]] == "completed"
        return {"fired": fired[0], **mine} if done else None

    runs = await eventually(ended, seconds=120, what="the fire's and the hook's runs to end")
    receipt = await json_of(
        f"agentledger receipt '{runs['fired']}' --tenant acme --json", stack_env
    )
    assert receipt["trigger"]["kind"] == "schedule" and receipt["trigger"]["name"] == "digest"
    assert receipt["charged_to"] == "schedule:digest"
    receipt = await json_of(
        f"agentledger receipt '{hook['run_id']}' --tenant acme --json", stack_env
    )
    assert receipt["task"] == "Triage this issue: The refunds page is down"
    assert receipt["charged_to"] == "hook:issues"
    # The schedule is gone; its run went on. The session took its message.
    assert await json_of("agentledger schedule list --tenant acme --json", stack_env) == []
    session = await json_of("agentledger status run-acme~chat-ana --tenant acme --json", stack_env)
    assert [m["text"] for m in session["messages"]] == ["And for gift cards?"]
    shown = await json_of("agentledger tenants show acme --json", stack_env)
    assert {(b["subject"], b["period"], b["mode"]) for b in shown["budgets"]} == {
        ("", "day", "enforcing"),
        ("", "month", "advisory"),
        ("hook:issues", "day", "enforcing"),
    }
    costs = await json_of("agentledger costs --by tenant --json --tenant acme", stack_env)
    assert costs[0]["tenant"] == "acme" and costs[0]["calls"] >= 4
