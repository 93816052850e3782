"""A narrow screen for prompt injection in tool results.

Tool output is data, but a model reads it as text: a page or a message that says "ignore
your instructions" can steer the run. Matches are not proof; they quarantine the step until
a person looks. The patterns are deliberately few and specific, to keep false alarms rare.
"""

from __future__ import annotations

import json
import re
from typing import Any

PATTERNS: dict[str, re.Pattern[str]] = {
    "ignore-instructions": re.compile(
        r"\b(ignore|disregard|forget)\b.{0,40}\b(previous|prior|above|all|earlier)\b.{0,20}"
        r"\b(instructions?|prompts?|rules|directions)\b",
        re.IGNORECASE | re.DOTALL,
    ),
    "new-identity": re.compile(
        r"\byou are now\b|\bact as (an? )?(unrestricted|jailbroken)\b", re.I
    ),
    "system-prompt": re.compile(
        r"\b(reveal|print|show|leak)\b.{0,30}\bsystem prompt\b|<\s*/?\s*system\s*>", re.I
    ),
    "exfiltrate": re.compile(
        r"\b(send|forward|email|post)\b.{0,60}\b(password|api[_ ]?key|secret|credentials|"
        r"customer list|all (the )?data)\b",
        re.IGNORECASE | re.DOTALL,
    ),
}


def scan(output: Any) -> list[str]:
    """Names of the patterns the output matches, in a stable order."""
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    return [name for name, pattern in PATTERNS.items() if pattern.search(text)]
