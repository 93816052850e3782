"""What `status` prints for a run, from its state."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentledger.cli import render
from agentledger.core.events import EventType
from agentledger.core.fleet_figures import PruneResult
from agentledger.core.results import RunMessage, RunState, WatchItem
from agentledger.core.states import RunStatus


def state(status: RunStatus) -> RunState:
    return RunState(
        run_id="run-1",
        status=status,
        tenant="default",
        user="anonymous",
        task="Summarize the policy.",
        current_step_id=None,
        steps=[],
        pending_approval=None,
        pause_requested=True,
        checkpoint={},
        tokens_in=0,
        tokens_out=0,
        cost_usd=0.0,
        result=None,
        error=None,
    )


@pytest.mark.parametrize(
    ("status", "shown"),
    [(RunStatus.PLANNING, True), (RunStatus.FAILED, False), (RunStatus.COMPLETED, False)],
)
def test_a_pause_request_shows_only_while_the_run_can_still_pause(status, shown):
    first_line = render.run_state(state(status)).splitlines()[0]
    assert ("(pause requested)" in first_line) is shown, first_line


def test_status_and_the_receipt_show_each_message_and_when_it_was_taken():
    said = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    waiting = RunMessage(message_id="a" * 32, text="Only 2025.", by="ana", received_at=said)
    taken = waiting.model_copy(
        update={
            "message_id": "b" * 32,
            "text": "Stop searching.",
            "taken_at": said,
            "taken_before_step": 4,
            "interrupted_step": "0003-model_call",
        }
    )
    shown = render.run_state(
        state(RunStatus.PLANNING).model_copy(update={"messages": [waiting, taken]})
    )
    assert "message aaaaaaaa from ana" in shown and "Only 2025." in shown
    assert "not taken: the run has not called its model since" in shown
    assert "before step 4; interrupted model call 0003-model_call" in shown
    receipt = render.receipt_markdown(
        {
            "run_id": "run-1",
            "outcome": "completed",
            "task": "t",
            "tenant": "default",
            "user": "anonymous",
            "tokens_in": 0,
            "tokens_out": 0,
            "cost_usd": 0.0,
            "duplicates_prevented": 0,
            "started_at": said.isoformat(),
            "finished_at": said.isoformat(),
            "side_effects": [],
            "approvals": [],
            "retries": [],
            "unresolved": [],
            "steps": [],
            "messages": [taken.model_dump(mode="json")],
        }
    )
    section = receipt.split("## Messages", 1)[1].split("## Retries", 1)[0]
    assert "from ana" in section and "Stop searching." in section and "before step 4" in section


def test_a_person_reads_times_in_the_machines_own_zone(monkeypatch):
    """Tables and status lines show moments in local time, the zone named; `--json` keeps
    ISO 8601 (the models dump themselves)."""
    import time

    from agentledger.cli.render import local_time, table

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        assert local_time("2026-12-05T03:00:00+00:00") == "2026-12-05 08:30:00 IST"
        shown = table(
            [{"key_id": "k1", "expires_at": "2026-12-05T03:00:00Z"}], ["key_id", "expires_at"]
        )
        assert "2026-12-05 08:30:00 IST" in shown and "T03:00" not in shown, shown
        assert local_time("not a time") == "not a time"
        # The watch timeline's clock, the stats window and the prune cutoff read the same.
        started = datetime(2026, 12, 5, 3, tzinfo=UTC)
        event = WatchItem(kind="event", type=EventType.RUN_STARTED, at=started)
        assert render.watch_line(event, "run-1").startswith("08:30:00 ")
        pruned = PruneResult(
            cutoff=datetime(2026, 12, 5, 3, tzinfo=UTC),
            dry_run=True,
            runs=0,
            deleted={},
            artifacts_kept_for_newer_runs=0,
        )
        assert "before 2026-12-05 08:30:00 IST" in render.prune_text(pruned)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_failed_eval_case_names_the_call_that_differs():
    from agentledger.cli.eval_render import differing_call
    from agentledger.core.eval_cases import RecordedCall, Recording
    from agentledger.core.eval_reports import CaseScore

    def recording(*calls: tuple[str, dict[str, object]]) -> Recording:
        return Recording(
            run_id="run-x",
            outcome="completed",
            calls=[RecordedCall(seq=i, tool=t, arguments=a) for i, (t, a) in enumerate(calls)],
        )

    base = recording(("search_notes", {"query": "refund"}), ("send_message", {"to": "ana"}))
    case = CaseScore(
        name="c1",
        task="t",
        run_id="run-y",
        baseline=base,
        candidate=recording(("search_notes", {"query": "refund"}), ("send_message", {"to": "bo"})),
        assertions={"same_calls": False},
    )
    assert differing_call(case) == (
        'call 2: recorded send_message({"to": "ana"}), candidate send_message({"to": "bo"})'
    )
    fewer = case.model_copy(update={"candidate": recording(("search_notes", {"query": "refund"}))})
    assert differing_call(fewer) == 'call 2: candidate left out send_message({"to": "ana"})'
    assert differing_call(case.model_copy(update={"assertions": {}})) is None  # it passed
