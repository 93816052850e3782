"""What one `run_code` execution may use, parsed once where settings are read, so a bad
AGENTLEDGER_SANDBOX_LIMITS stops every entry point with one line instead of the first run."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from agentledger.core.errors import SetupError


@dataclass(frozen=True)
class SandboxLimits:
    """What one execution may use. Change them with `--sandbox-limits seconds=60,memory_mb=512`
    (or AGENTLEDGER_SANDBOX_LIMITS)."""

    seconds: float = 30.0  # wall-clock time of the code, then it is killed
    memory_mb: int = 256  # memory, swap included (none beyond it)
    cpus: float = 1.0  # CPU cores
    pids: int = 64  # processes and threads at once
    output_bytes: int = 1_000_000  # stdout and stderr together; past it the code is killed
    scratch_mb: int = 64  # the writable tmpfs at /sandbox (code, inputs, outputs)
    input_bytes: int = 8_000_000  # the code and the input files staged into the container

    @classmethod
    def parse(cls, raw: str) -> SandboxLimits:
        """`seconds=60,memory_mb=512`: any of the fields, the rest their defaults."""
        known = {f.name: f for f in fields(cls)}
        limits = cls()
        for part in filter(None, (p.strip() for p in raw.split(","))):
            name, _, value = part.partition("=")
            name = name.strip()
            if name not in known:
                raise SetupError(
                    f"sandbox limit {name!r}: expected one of {', '.join(known)} (NAME=VALUE)"
                )
            try:
                number = float(value) if known[name].type == "float" else int(value)
            except ValueError:
                raise SetupError(f"sandbox limit {part!r}: {value!r} is not a number") from None
            if number <= 0:
                raise SetupError(f"sandbox limit {part!r}: must be positive")
            changed: dict[str, Any] = {name: number}
            limits = replace(limits, **changed)
        return limits
