"""One logging setup for every agentledger process: the worker, the CLI and the dev servers.

Library modules log to `logging.getLogger(__name__)` and never print; a process's entry point
calls `configure_logging` once, which sends records to stderr, as text for people or, with
AGENTLEDGER_LOG_FORMAT=json, as one JSON object per line for a log pipeline. Other libraries'
records (pgserver's initdb output, the SDK's shutdown notes) are heard from WARNING up, or
all of them at DEBUG: a person sees agentledger's lines, not its dependencies'. An application that
embeds agentledger (`agentledger.run_worker` in its own process) keeps its own logging setup: this
is only called by agentledger's own commands.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LEVELS: tuple[LogLevel, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# HTTP clients that log every request at INFO (the model client's, one line per model call):
# not even made into records below DEBUG.
CHATTY = ("httpx", "httpx2", "httpcore", "httpcore2")
# Loggers heard at the level asked: agentledger's, and the SDK's workflow and activity loggers
# (what workflow and activity code, ours and a user's, logs through).
OWN = ("agentledger", "__main__", "temporalio.workflow", "temporalio.activity")

# What every LogRecord carries; anything else on a record came from `extra=` (or from
# Temporal's activity and workflow loggers) and is written as a field of its own.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: time, level, logger, message, then the
    record's extra fields and, for an exception, its formatted traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


class _AgentLedgerHandler(logging.StreamHandler[TextIO]):
    """The one handler `configure_logging` installs; found again and replaced, never stacked."""


def own_or_warning(record: logging.LogRecord) -> bool:
    """agentledger's records at any level; another library's from WARNING up."""
    name = record.name
    return record.levelno >= logging.WARNING or any(
        name == own or name.startswith(own + ".") for own in OWN
    )


def configure_logging(
    level: str = "INFO", fmt: LogFormat = "text", stream: TextIO | None = None
) -> None:
    """Send agentledger's records at `level` and above, and other libraries' from WARNING up
    (all at DEBUG), to stderr (or `stream`) in `fmt`.

    Calling it again replaces the handler it installed before, and leaves other handlers
    (a test runner's, an embedding application's) alone."""
    if level.upper() not in LEVELS:
        raise ValueError(f"log level {level!r}: one of {', '.join(LEVELS)}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _AgentLedgerHandler)]:
        root.removeHandler(old)
    handler = _AgentLedgerHandler(stream or sys.stderr)
    handler.setLevel(level.upper())  # a chatty library's own logger level does not widen it
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    if level.upper() != "DEBUG":
        handler.addFilter(own_or_warning)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if level.upper() == "DEBUG" else "WARNING")
