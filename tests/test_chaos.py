"""The short chaos run: every fault point, SIGKILLs, a Temporal restart, a Postgres outage.

`python chaos/run.py` is the long version (200 runs under SIGKILLs, a 30 s outage). This
runs the same code at a size CI can afford and holds it to the same audit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentledger.core import faults
from chaos.kinds import CHILD, KINDS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(900)
def test_quick_chaos_breaks_nothing(tmp_path):
    report = tmp_path / "chaos.json"
    done = subprocess.run(
        [sys.executable, "chaos/run.py", "--quick", "--json", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = {o["scenario"]: o for o in json.loads(report.read_text())}
    assert set(outcomes) == {"points", "kill", "temporal", "postgres"}
    for name, o in outcomes.items():
        assert o["problems"] == [], f"{name}: {o['problems']}"
        assert o["runs"] > 0 and o["completed"] == o["runs"], name
        assert o["disruptions"] > 0, f"{name}: the chaos never struck"
        for count in ("duplicate", "divergent", "lost", "orphan"):
            assert o[count] == 0, f"{name}: {count} mirror rows"
        assert o["duplicate_effects"] == o["missing_effects"] == o["paid_twice"] == 0, name
    # Every named fault point fired (the zombie hangs instead of dying).
    assert outcomes["points"]["disruptions"] == len(faults.POINTS)
    assert outcomes["points"]["figures"]["zombie late writes fenced off"] > 0
    assert outcomes["kill"]["figures"]["SIGKILLs"] > 0
    assert outcomes["postgres"]["figures"]["mirror holds all history accepted after (s)"] <= 10
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.timeout(560)
def test_mixed_chaos_breaks_nothing(tmp_path):
    """SIGKILLs, fault points, a Temporal restart and a Postgres outage on one load at once
    (`python chaos/run.py --mixed` does it to 1,000 runs), of every kind of run: sessions that
    compact, sub-agents whose child waits for an approval, `say`, forks, a tenant with a keyed
    approver and a capped one, with a deploy of a new build in the middle; children audited
    like any run, none orphaned."""
    report = tmp_path / "mixed.json"
    publish = ["--publish", str(tmp_path / "published"), "--seed", "11"]
    done = subprocess.run(
        [sys.executable, "chaos/run.py", "--mixed", "--quick", "--json", str(report), *publish],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    [o] = json.loads(report.read_text())
    assert o["scenario"] == "mixed"
    assert o["problems"] == [], o["problems"]
    figures = o["figures"]
    kinds = figures["runs by kind"]
    assert set(kinds) == {*KINDS, CHILD}, kinds
    started = sum(count for kind, count in kinds.items() if kind != CHILD)
    assert started == 12 and kinds[CHILD] == kinds["subagent"], kinds
    assert o["runs"] == o["completed"] == 12 + kinds[CHILD]
    assert figures["sessions that compacted"] >= 1 and figures["seed"] == 11
    assert sum(figures["say answered"].values()) == kinds["say"]
    assert set(figures["builds deployed (s each took)"]) == {"v1", "v2"}  # v2 mid-load
    pinned = figures["runs by the build they are pinned to"]
    assert set(pinned) == {"v1", "v2"} and sum(pinned.values()) == 12, pinned
    assert figures["capped runs that queued behind the cap"] >= 1
    for count in ("duplicate", "divergent", "lost", "orphan"):
        assert o[count] == 0, f"{count} mirror rows"
    assert o["duplicate_effects"] == o["missing_effects"] == o["paid_twice"] == 0
    assert o["missing_receipts"] == 0
    assert figures["Temporal restarts"] == figures["Postgres outages"] == 1
    assert figures["SIGKILLs"] + sum(figures["faults fired"].values()) > 0
    assert o["disruptions"] >= 3
    assert "chaos: mixed: " in done.stdout  # it says how far it got while it runs
    published = tmp_path / "published" / "mixed-every-feature-seed-11"
    assert json.loads(published.with_suffix(".json").read_text()) == [o]
    assert "runs by kind" in published.with_suffix(".txt").read_text()
    assert done.returncode == 0, done.stdout[-3000:]
