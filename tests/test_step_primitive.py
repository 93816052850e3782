"""A step's record is built in one place: the step primitive (`Recording.step`).

Every step of a run is allocated, moved to its kind's status and recorded by
`agentledger/workflows/steps.py`; a record built by hand elsewhere would drift from the
others (its seq, its start, its input) the way the seven hand-written copies did.
"""

from __future__ import annotations

import re
from pathlib import Path

import agentledger

PACKAGE = Path(agentledger.__file__).parent
PRIMITIVE = PACKAGE / "workflows" / "steps.py"
BUILT = re.compile(r"(?<!class )\bStepRecord\(")


def test_no_step_record_is_built_outside_the_step_primitive():
    built = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PRIMITIVE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BUILT.search(line)
    ]
    assert built == [], "build step records with `async with self.step(...)`: " + ", ".join(built)
    assert BUILT.search(PRIMITIVE.read_text()), "the primitive itself builds them"
