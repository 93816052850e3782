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

from agentrun.core import faults

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
