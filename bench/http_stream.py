"""The HTTP door's event stream, measured on the real stack: events per second delivered to
concurrent clients, and the time from a model's token to the client that shows it.

    python -m bench.http_stream             # the full run (about 2 minutes on 2 cores)
    python -m bench.http_stream --quick     # a small, fast version
    python -m bench.http_stream --publish   # also write docs/bench/http-stream.{json,md}
    python -m bench.http_stream --before main --pairs 2 --publish
                                            # this tree beside main's code, taking turns

It starts a fresh embedded stack (Temporal dev server, pgserver Postgres) in a temporary
folder, the offline model, one `agentledger-worker` and `agentledger serve` as users run them,
and talks to the door over real HTTP with a key per client. Each run's model call streams
its answer in pieces of one numbered token (`<label:007>`), `STREAM_PAUSE_SECONDS` apart;
the model server notes when it flushed each piece (`OfflineModelServer.streamed`), and the
client notes when a token first appears in what `GET /v1/runs/{id}/events` sent it: the
difference is a token's time from the model to the client, through whatever carries the
text (since generation 6, the worker's Postgres write and the door's `LISTEN`; before, the
worker's text batches, the run's workflow stream and the door's poll of it) and the SSE
response. Measured with httpx, and in Chromium (a page reading the same stream with
`fetch`), when Playwright and a Chromium are installed. Events per second: clients reading
ended runs' streams (from the mirror) back to back, every SSE event counted. Figures are
printed, never asserted.

With `--before REV` the same measurements run on REV's code too (a git worktree; its worker
and door processes import it through PYTHONPATH), taking turns with this tree `--pairs`
times, each side on a fresh stack of its own, so a busy spell of the machine falls on both:
the report puts the two side by side, pooled over the pairs, with each side's load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg

from agentledger import RunClient
from agentledger.core.config import AgentLedgerConfig
from agentledger.dev.offline_model import (
    STREAM_PIECE_CHARS,
    Json,
    OfflineModelServer,
    Reply,
    completion,
)
from agentledger.dev.stack import EmbeddedStack, free_port
from bench import before_after, harness, report, stats
from bench.run import machine_info

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "docs" / "bench" / "http-stream"
CHROMIUM = os.environ.get("AGENTLEDGER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
# A reply of TOKENS pieces, each one numbered token padded to the model server's piece size,
# so a piece is a token and each token says which run and which place it is.
TOKENS = 40
STREAM_PAUSE_SECONDS = 0.05
# The reply waits this long before its first piece, so the client's stream is open by then:
# a token replayed to a client that connected late would be timed from before it asked.
REPLY_DELAY_SECONDS = 1.0
LABEL = re.compile(r"label (\w+)")
TOKEN = re.compile(r"<(\w+):(\d{3})>")
# The door's limits are for people; the bench's clients are not throttled by them.
DOOR_ENV = {
    "AGENTLEDGER_HTTP_REQUESTS_PER_SECOND": "100000",
    "AGENTLEDGER_HTTP_STREAMS_PER_KEY": "1000",
}
RUN_SECONDS = 120.0


@dataclass
class Config:
    mode: str
    latency_levels: tuple[int, ...]  # runs followed at once, each by its own client
    rounds: int  # times each level is run
    browser_runs: int
    replay_clients: tuple[int, ...]
    replay_seconds: float
    note: str = ""


FULL = Config("full", (1, 10), 4, 4, (1, 10), 10.0)
QUICK = Config("quick", (1, 2), 1, 1, (1, 2), 2.0)
# Issue 52's targets for this tree (milliseconds, the model's flush to the client's sight).
TARGETS = (
    ("token → client p50, 1 run", "1", "token_ms", "p50", 25.0),
    ("token → client p95, 1 run", "1", "token_ms", "p95", 60.0),
    ("token → client p50, 10 runs at once", "10", "token_ms", "p50", 50.0),
    ("first token p50 after the model's first byte, 1 run", "1", "first_token_ms", "p50", 100.0),
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def token_text(label: str) -> str:
    return "".join(f"<{label}:{i:03d}>".ljust(STREAM_PIECE_CHARS, ".") for i in range(TOKENS))


def responder(request: Json) -> Reply:
    """Answer every call at once with numbered tokens, labelled as the task asks."""
    asked = " ".join(str(m.get("content") or "") for m in request.get("messages", []))
    found = LABEL.search(asked)
    reply = completion(request, content=token_text(found.group(1) if found else "x"))
    reply.delay_seconds = REPLY_DELAY_SECONDS
    return reply


def first_seen(text: str, seen: dict[str, float], at: float) -> None:
    """Note `at` for each token of `text` not seen before."""
    for match in TOKEN.finditer(text):
        seen.setdefault(match.group(0), at)


def token_latencies(emitted: dict[str, float], seen: dict[str, float]) -> list[float]:
    """Milliseconds from each token's flush at the model to its first sight at the client."""
    return [(seen[t] - emitted[t]) * 1000 for t in emitted if t in seen]


def first_token_latencies(emitted: dict[str, float], seen: dict[str, float]) -> list[float]:
    firsts = [t for t in emitted if t.endswith(":000>") and t in seen]
    return [(seen[t] - emitted[t]) * 1000 for t in firsts]


class Door:
    """The stack's parts the bench talks to: the door's URL, a key per client, the model."""

    def __init__(self, url: str, keys: list[str], model: OfflineModelServer) -> None:
        self.url = url
        self.keys = keys
        self.model = model
        self.run_ids: list[str] = []  # every run started, each followed to its receipt

    def emitted(self) -> dict[str, float]:
        """Each token the model flushed, and when (epoch seconds)."""
        found: dict[str, float] = {}
        for at, piece in list(self.model.streamed):
            first_seen(piece, found, at)
        return found

    async def start(self, http: httpx.AsyncClient, key: str, label: str) -> str:
        answer = await http.post(
            f"{self.url}/v1/runs",
            json={"task": f"Answer in numbered tokens, label {label}"},
            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": label},
        )
        answer.raise_for_status()
        run_id = str(answer.json()["run_id"])
        self.run_ids.append(run_id)
        return run_id

    async def follow(
        self, http: httpx.AsyncClient, key: str, run_id: str, seen: dict[str, float]
    ) -> int:
        """Read the run's stream to its receipt; note when each token first came. The
        number of SSE events it sent."""
        events = 0
        async with http.stream(
            "GET", f"{self.url}/v1/runs/{run_id}/events", headers={"Authorization": f"Bearer {key}"}
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    events += 1
                elif line.startswith("data:"):
                    first_seen(line, seen, time.time())
        return events


async def latency_level(door: Door, level: int, rounds: int) -> dict[str, Any]:
    """`level` runs at once, each followed by its own client, `rounds` times."""
    seen: dict[str, float] = {}
    events, wall = 0, 0.0
    async with httpx.AsyncClient(timeout=RUN_SECONDS) as http:
        for _ in range(rounds):
            labels = [f"c{level}r{uuid.uuid4().hex[:8]}" for _ in range(level)]
            started = time.monotonic()

            async def one(i: int, label: str) -> int:
                key = door.keys[i % len(door.keys)]
                run_id = await door.start(http, key, label)
                return await door.follow(http, key, run_id, seen)

            counts = await asyncio.wait_for(
                asyncio.gather(*(one(i, label) for i, label in enumerate(labels))), RUN_SECONDS
            )
            events += sum(counts)
            wall += time.monotonic() - started
    emitted = {t: at for t, at in door.emitted().items() if t[1:].startswith(f"c{level}r")}
    return {
        "runs": level * rounds,
        "tokens_emitted": len(emitted),
        **latencies(emitted, seen),
        "live_events": events,
        "live_events_per_second": events / wall if wall else None,
        "wall_seconds": wall,
    }


def latencies(emitted: dict[str, float], seen: dict[str, float]) -> dict[str, Any]:
    """Each token's and each first token's latency, summarized and as measured (`*_samples`:
    side-by-side runs pool them)."""
    tokens, firsts = token_latencies(emitted, seen), first_token_latencies(emitted, seen)
    return {
        "token_ms": stats.summarize(tokens),
        "first_token_ms": stats.summarize(firsts),
        "token_ms_samples": tokens,
        "first_token_ms_samples": firsts,
    }


# The page's client: start a run, read its stream with fetch, note when each token came.
PAGE_CLIENT = """
async ([key, label]) => {
  const auth = {"Authorization": "Bearer " + key};
  const started = await fetch("/v1/runs", {method: "POST", body: JSON.stringify(
    {task: "Answer in numbered tokens, label " + label}),
    headers: {...auth, "Content-Type": "application/json", "Idempotency-Key": label}});
  const runId = (await started.json()).run_id;
  const response = await fetch("/v1/runs/" + runId + "/events", {headers: auth});
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const seen = {};
  let text = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    const now = Date.now() / 1000;
    text += value;
    for (const m of text.matchAll(/<(\\w+):(\\d{3})>/g)) if (!(m[0] in seen)) seen[m[0]] = now;
  }
  return seen;
}
"""


async def browser_latency(door: Door, runs: int) -> dict[str, Any]:
    """Tokens to a page in Chromium, one run at a time; None without Playwright or Chromium."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        return {"skipped": "playwright is not installed (the browser extra)"}
    if not os.path.exists(CHROMIUM):  # noqa: ASYNC240 - one stat, before anything runs
        return {"skipped": f"no Chromium at {CHROMIUM}"}
    seen: dict[str, float] = {}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{door.url}/healthz")  # the door's origin: no CORS to pass
            for _ in range(runs):
                label = f"bw{uuid.uuid4().hex[:8]}"
                found = await asyncio.wait_for(
                    page.evaluate(PAGE_CLIENT, [door.keys[0], label]), RUN_SECONDS
                )
                seen.update(found)
        finally:
            await browser.close()
    emitted = {t: at for t, at in door.emitted().items() if t[1:].startswith("bw")}
    return {"runs": runs, "tokens_emitted": len(emitted), **latencies(emitted, seen)}


async def replay_rate(door: Door, run_ids: list[str], clients: int, seconds: float) -> Json:
    """`clients` clients reading ended runs' streams back to back for `seconds`."""
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=RUN_SECONDS) as http:

        async def client(i: int) -> tuple[int, int]:
            key, events, streams = door.keys[i % len(door.keys)], 0, 0
            while time.monotonic() < deadline:
                run_id = run_ids[(i + streams) % len(run_ids)]
                events += await door.follow(http, key, run_id, {})
                streams += 1
            return events, streams

        started = time.monotonic()
        counts = await asyncio.gather(*(client(i) for i in range(clients)))
        elapsed = time.monotonic() - started
    events = sum(c[0] for c in counts)
    return {
        "clients": clients,
        "seconds": elapsed,
        "streams": sum(c[1] for c in counts),
        "events": events,
        "events_per_second": events / elapsed,
    }


@contextlib.asynccontextmanager
async def serving(env: dict[str, str], tree: Path = ROOT) -> AsyncIterator[str]:
    """`agentledger serve --port 0` (of the code `env` imports) in `tree` until the block
    ends; its URL from its first line."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "agentledger"),
        "serve",
        "--port",
        "0",
        cwd=tree,
        env={**os.environ, **env, **DOOR_ENV},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line.startswith("serving on "):
            raise RuntimeError(f"`agentledger serve` did not start: {line!r}")
        yield line.split()[2]
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)


async def measure(
    cfg: Config, temporal_address: str, database_url: str, home: Path, tree: Path = ROOT
) -> dict[str, Any]:
    """Every figure, on a stack already up: a worker and a door of the bench's own (of the
    code in `tree`), on a task queue and tenants of its own."""
    tenant = f"bench{uuid.uuid4().hex[:6]}"
    clients = max(*cfg.latency_levels, *cfg.replay_clients)
    found: dict[str, Any] = {"errors": {}}
    with OfflineModelServer(responder, stream_pause_seconds=STREAM_PAUSE_SECONDS) as model:
        env = {
            "TEMPORAL_ADDRESS": temporal_address,
            "DATABASE_URL": database_url,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTLEDGER_HOME": str(home),
            "AGENTLEDGER_TASK_QUEUE": harness.new_queue("http-stream"),
            **({"PYTHONPATH": str(tree)} if tree != ROOT else {}),
        }
        async with RunClient.lazy(AgentLedgerConfig.load(env)) as operator:
            await operator.migrate()
            keys = [(await operator.keys.create(tenant, "runner")).key for _ in range(clients)]
        worker = harness.WorkerProcess(
            [str(Path(sys.executable).parent / "agentledger-worker"), "--demo"], env
        )
        await worker.start(ready_line="polling")
        try:
            async with serving(env, tree) as url:
                door = Door(url, keys, model)
                found["latency"] = {}
                stages: list[tuple[str, Callable[[], Awaitable[Json]], Callable[[Json], None]]] = [
                    *(
                        (
                            f"latency at {n}",
                            partial(latency_level, door, n, cfg.rounds),
                            partial(found["latency"].__setitem__, str(n)),
                        )
                        for n in cfg.latency_levels
                    ),
                    (
                        "browser",
                        partial(browser_latency, door, cfg.browser_runs),
                        partial(found.__setitem__, "browser"),
                    ),
                ]
                for name, stage, keep in stages:
                    log(f"== {name}")
                    try:
                        keep(await stage())
                    except Exception as err:  # the other figures still count
                        found["errors"][name] = f"{type(err).__name__}: {err}"
                        log(f"  {name} did not finish: {found['errors'][name]}")
                log("== replay")
                found["replay"] = {
                    str(n): await replay_rate(door, door.run_ids, n, cfg.replay_seconds)
                    for n in cfg.replay_clients
                }
        finally:
            await worker.stop()
    return found


def summary_table(results: dict[str, Any]) -> str:
    def ms(summary: dict[str, Any] | None) -> str:
        if not summary or not summary.get("n"):
            return "—"
        return f"{stats.fmt(summary['p50'], ' ms')} / {stats.fmt(summary['p95'], ' ms')}"

    rows: list[list[Any]] = []
    for level, part in (results.get("latency") or {}).items():
        rows.append(
            [
                f"httpx, {level} run(s) at once, a client each",
                part["runs"],
                ms(part["token_ms"]),
                ms(part["first_token_ms"]),
                stats.fmt(part["live_events_per_second"]),
            ]
        )
    browser = results.get("browser") or {}
    if "token_ms" in browser:
        rows.append(
            [
                "Chromium (fetch in a page), 1 run at a time",
                browser["runs"],
                ms(browser["token_ms"]),
                ms(browser["first_token_ms"]),
                "—",
            ]
        )
    latency = stats.render_table(
        ["client", "runs", "token → client p50 / p95", "first token p50 / p95", "live events/s"],
        rows,
    )
    replay = stats.render_table(
        ["clients at once", "streams read", "SSE events", "events/s delivered"],
        [
            [n, part["streams"], part["events"], stats.fmt(part["events_per_second"])]
            for n, part in (results.get("replay") or {}).items()
        ],
    )
    return f"{latency}\n\n{replay}"


def targets_table(figures: dict[str, Any]) -> str:
    """Issue 52's targets, on `figures` (one run's, or a side's pooled)."""
    rows = []
    for label, level, what, stat, limit in TARGETS:
        value = ((figures.get("latency") or {}).get(level) or {}).get(what, {}).get(stat)
        verdict = "not measured" if value is None else "met" if value <= limit else "**not met**"
        rows.append([label, stats.fmt(value, " ms"), f"≤ {limit:.0f} ms", verdict])
    return stats.render_table(["target", "measured", "target", "met"], rows)


def side_by_side_table(results: dict[str, Any]) -> str:
    """Each figure of the earlier code and of this tree, pooled over the pairs, and their
    ratio."""
    before, after = results["sides"]["before"], results["sides"]["after"]
    rows: list[list[Any]] = []

    def row(label: str, *path: str) -> None:
        def read(side: Any) -> Any:
            for key in path:
                side = side.get(key) if isinstance(side, dict) else None
            return side

        b, a = read(before), read(after)
        rows.append([label, stats.fmt(b), stats.fmt(a), stats.fmt_ratio(stats.ratio(a, b))])

    for level in after.get("latency") or {}:
        who = f"httpx, {level} run(s) at once"
        for stat in ("p50", "p95"):
            row(f"{who}: token → client {stat} (ms)", "latency", level, "token_ms", stat)
        row(f"{who}: first token p50 (ms)", "latency", level, "first_token_ms", "p50")
        row(f"{who}: live events/s", "latency", level, "live_events_per_second")
    if "browser" in after:
        for stat in ("p50", "p95"):
            row(f"Chromium: token → page {stat} (ms)", "browser", "token_ms", stat)
        row("Chromium: first token p50 (ms)", "browser", "first_token_ms", "p50")
    for clients in after.get("replay") or {}:
        row(
            f"ended runs' streams, {clients} client(s): events/s",
            "replay",
            clients,
            "events_per_second",
        )
    return stats.render_table(
        ["figure", f"{before['rev']} (before)", after["rev"], "this ÷ before"], rows
    )


def full_report(results: dict[str, Any]) -> str:
    machine = results.get("machine") or {}
    load = machine.get("load_average_at_start")
    said = [results["note"]] if results.get("note") else []
    said += [f"load average at the start {load[0]:.1f}"] if load else []
    sides = results.get("sides")
    if sides:
        loads = {
            side: ", ".join(f"{r['load_average_at_start'][0]:.1f}" for r in part["runs"])
            for side, part in sides.items()
        }
        said.append(
            f"load average (1 min) at each turn's start: before {loads['before']}; "
            f"this tree {loads['after']}"
        )
    parts = [
        f"Machine: {report.machine_line(machine)}",
        f"Run: {results.get('started_at', '?')}, {stats.fmt(results.get('wall_seconds'), ' s', 0)}"
        f" in all; {results.get('config', {}).get('mode', '')}",
        *(["Load: " + "; ".join(said)] if said else []),
        "The HTTP door's event stream (`bench/http_stream.py`): a model's token to the client, "
        f"each run's answer {TOKENS} tokens, one every {STREAM_PAUSE_SECONDS * 1000:.0f} ms; "
        "live events/s: every SSE event the clients got over the rounds' wall time.",
    ]
    if sides:
        pairs = len(sides["after"]["runs"])
        parts += [
            f"The earlier code and this tree, taking turns ({pairs} each, each on a fresh "
            "stack); every latency sample of a side's turns pooled:",
            side_by_side_table(results),
            "Targets (issue 52), this tree:",
            targets_table(sides["after"]),
        ]
        runs = [r for side in sides.values() for r in side["runs"]]
    else:
        parts += [
            summary_table(results),
            "Events/s delivered: clients reading ended runs' streams (from the Postgres mirror) "
            "back to back, each with its own key.",
            "Targets (issue 52):",
            targets_table(results),
        ]
        runs = [results]
    for found in runs:
        browser = found.get("browser") or {}
        if "skipped" in browser:
            parts.append(f"Chromium: not measured ({browser['skipped']}).")
            break
    for found in runs:
        for stage, error in (found.get("errors") or {}).items():
            parts.append(f"{stage} did not finish: {error}")
    return "\n\n".join(parts)


async def on_fresh_stack(cfg: Config, tree: Path = ROOT) -> dict[str, Any]:
    """Every figure for the code in `tree`, on a fresh embedded stack of its own."""
    found: dict[str, Any] = {"load_average_at_start": list(os.getloadavg())}
    t0 = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="agentledger-bench-http-"))
    stack = EmbeddedStack(
        home=home,
        temporal_port=free_port(),
        ui_port=free_port(),
        ui=False,
        fast_dispatch=False,  # the server's defaults, as in bench/run.py
    )
    try:
        endpoints = await asyncio.to_thread(stack.start)
        async with await psycopg.AsyncConnection.connect(endpoints["database_url"]) as conn:
            row = await (await conn.execute("SHOW server_version")).fetchone()
            found["postgres"] = f"PostgreSQL {row[0] if row else '?'} (pgserver)"
        log(f"stack up in {time.monotonic() - t0:.1f}s at {home}")
        found.update(
            await measure(cfg, endpoints["temporal_address"], endpoints["database_url"], home, tree)
        )
    finally:
        await asyncio.to_thread(stack.stop)
        shutil.rmtree(home, ignore_errors=True)
    found["wall_seconds"] = time.monotonic() - t0
    return found


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' figures as one: latencies from every sample, rates over all the time."""
    out: dict[str, Any] = {"latency": {}, "replay": {}}

    def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        tokens = [v for part in parts for v in part.get("token_ms_samples", [])]
        firsts = [v for part in parts for v in part.get("first_token_ms_samples", [])]
        merged: dict[str, Any] = {
            "runs": sum(part.get("runs", 0) for part in parts),
            "token_ms": stats.summarize(tokens),
            "first_token_ms": stats.summarize(firsts),
        }
        wall = sum(part.get("wall_seconds") or 0 for part in parts)
        if wall:
            merged["live_events_per_second"] = sum(part["live_events"] for part in parts) / wall
        return merged

    for level in runs[0].get("latency") or {}:
        out["latency"][level] = merge([r["latency"][level] for r in runs if level in r["latency"]])
    browsers = [r["browser"] for r in runs if "token_ms" in (r.get("browser") or {})]
    if browsers:
        out["browser"] = merge(browsers)
    for clients in runs[0].get("replay") or {}:
        parts = [r["replay"][clients] for r in runs if clients in (r.get("replay") or {})]
        seconds = sum(part["seconds"] for part in parts)
        events = sum(part["events"] for part in parts)
        out["replay"][clients] = {
            "clients": int(clients),
            "seconds": seconds,
            "streams": sum(part["streams"] for part in parts),
            "events": events,
            "events_per_second": events / seconds if seconds else None,
        }
    return out


async def run(cfg: Config, before: str | None = None, pairs: int = 1) -> dict[str, Any]:
    """This tree's figures on a fresh stack; with `before`, that commit's too, taking turns
    `pairs` times."""
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": asdict(cfg),
        "machine": machine_info(),
        "note": cfg.note,
    }
    t0 = time.monotonic()
    if before is None:
        results.update(await on_fresh_stack(cfg))
    else:
        rev = before_after.short_rev(before)
        if not rev:
            raise SystemExit(f"{before!r} is not a commit of this repository")
        sides: dict[str, dict[str, Any]] = {
            "before": {"rev": rev, "runs": []},
            "after": {"rev": f"this tree (HEAD {before_after.short_rev('HEAD')})", "runs": []},
        }
        with (
            tempfile.TemporaryDirectory(prefix="agentledger-http-before-") as scratch,
            before_after.earlier_tree(rev, Path(scratch)) as earlier,
        ):
            for n in range(pairs):
                order = [("before", earlier), ("after", ROOT)]
                for side, tree in order if n % 2 == 0 else order[::-1]:
                    log(f"== pair {n + 1}: {side} ({sides[side]['rev']})")
                    sides[side]["runs"].append(await on_fresh_stack(cfg, tree))
        for side in sides.values():
            side.update(pooled(side["runs"]))
        results["sides"] = sides
        results["machine"]["postgres"] = sides["after"]["runs"][0].get("postgres")
    results["wall_seconds"] = time.monotonic() - t0
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a small, fast version")
    parser.add_argument("--publish", action="store_true", help="write docs/bench/http-stream.*")
    parser.add_argument("--note", default="", help="printed under the machine line")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--before", metavar="REV", help="also measure REV's code, taking turns with this tree"
    )
    parser.add_argument(
        "--pairs", type=int, default=2, help="with --before: turns each side takes (default 2)"
    )
    args = parser.parse_args(argv)
    cfg = replace(QUICK if args.quick else FULL, note=args.note)
    results = asyncio.run(run(cfg, args.before, max(1, args.pairs)))
    text = full_report(results)
    targets = [args.out / "http-stream"] + ([PUBLISHED] if args.publish else [])
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str))
        target.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
