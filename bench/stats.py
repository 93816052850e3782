"""Pure helpers: percentiles, summaries, ratios and Markdown tables. No I/O, no clocks."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between ranks (numpy's default).

    None for no values: a figure that was not measured must not print as zero.
    """
    data = sorted(values)
    if not data:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, not {q}")
    rank = (len(data) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    if low == high:
        return data[low]
    return data[low] + (data[high] - data[low]) * (rank - low)


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, min, p50, p95, p99 and max of a sample (None where there is no sample)."""
    return {
        "n": len(values),
        "mean": sum(values) / len(values) if values else None,
        "min": min(values) if values else None,
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def deltas(times: Sequence[float]) -> list[float]:
    """Gaps between consecutive timestamps: the cadence of a run's steps."""
    return [b - a for a, b in itertools.pairwise(times)]


def fmt(value: float | None, unit: str = "", digits: int = 1) -> str:
    """A figure for a table: fixed digits, '—' when it was not measured."""
    if value is None:
        return "—"
    return f"{value:,.{digits}f}{unit}"


def fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table whose columns line up in a terminal too."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    for row in cells:
        if len(row) != len(headers):
            raise ValueError(f"row {row} has {len(row)} cells, the table has {len(headers)}")
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])
