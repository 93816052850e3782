"""This deployment's own activities, registered by worker.py beside agentledger's engine."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from activities.refunds import RefundActivities


def for_worker(refund_ledger: Path) -> list[Callable[..., Any]]:
    """The activities worker.py registers, with the clients they are given."""
    return [RefundActivities(refund_ledger).record]


__all__ = ["RefundActivities", "for_worker"]
