"""The HTTP door's event stream, measured on the real stack: events per second delivered to
concurrent clients, and the time from a model's token to the client that shows it.

    python -m bench.http_stream             # the full run (about 2 minutes on 2 cores)
    python -m bench.http_stream --quick     # a small, fast version
    python -m bench.http_stream --publish   # also write docs/bench/http-stream.{json,md}

It starts a fresh embedded stack (Temporal dev server, pgserver Postgres) in a temporary
folder, the offline model, one `agentledger-worker` and `agentledger serve` as users run them,
and talks to the door over real HTTP with a key per client. Each run's model call streams
its answer in pieces of one numbered token (`<label:007>`), `STREAM_PAUSE_SECONDS` apart;
the model server notes when it flushed each piece (`OfflineModelServer.streamed`), and the
client notes when a token first appears in what `GET /v1/runs/{id}/events` sent it: the
difference is a token's time from the model to the client, through the worker's text
batches, the run's workflow stream, the door's poll of it and the SSE response. Measured
with httpx, and in Chromium (a page reading the same stream with `fetch`), when
Playwright and a Chromium are installed. Events per second: clients reading ended runs'
streams (from the mirror) back to back, every SSE event counted. Figures are printed,
never asserted.
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
from bench import harness, report, stats
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
        "token_ms": stats.summarize(token_latencies(emitted, seen)),
        "first_token_ms": stats.summarize(first_token_latencies(emitted, seen)),
        "live_events": events,
        "live_events_per_second": events / wall if wall else None,
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
    return {
        "runs": runs,
        "tokens_emitted": len(emitted),
        "token_ms": stats.summarize(token_latencies(emitted, seen)),
        "first_token_ms": stats.summarize(first_token_latencies(emitted, seen)),
    }


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
async def serving(env: dict[str, str]) -> AsyncIterator[str]:
    """`agentledger serve --port 0` until the block ends; its URL from its first line."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "agentledger"),
        "serve",
        "--port",
        "0",
        cwd=ROOT,
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
    cfg: Config, temporal_address: str, database_url: str, home: Path
) -> dict[str, Any]:
    """Every figure, on a stack already up: a worker and a door of the bench's own, on a
    task queue and tenants of its own."""
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
        }
        async with RunClient.lazy(AgentLedgerConfig.load(env)) as operator:
            await operator.migrate()
            keys = [(await operator.keys.create(tenant, "runner")).key for _ in range(clients)]
        worker = harness.WorkerProcess(
            [str(Path(sys.executable).parent / "agentledger-worker"), "--demo"], env
        )
        await worker.start(ready_line="polling")
        try:
            async with serving(env) as url:
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


def full_report(results: dict[str, Any]) -> str:
    machine = results.get("machine") or {}
    load = machine.get("load_average_at_start")
    said = [results["note"]] if results.get("note") else []
    said += [f"load average at the start {load[0]:.1f}"] if load else []
    parts = [
        f"Machine: {report.machine_line(machine)}",
        f"Run: {results.get('started_at', '?')}, {stats.fmt(results.get('wall_seconds'), ' s', 0)}"
        f" in all; {results.get('config', {}).get('mode', '')}",
        *(["Load: " + "; ".join(said)] if said else []),
        "The HTTP door's event stream (`bench/http_stream.py`): a model's token to the client, "
        f"each run's answer {TOKENS} tokens, one every {STREAM_PAUSE_SECONDS * 1000:.0f} ms; "
        "live events/s: every SSE event the clients got over the rounds' wall time.",
        summary_table(results),
        "Events/s delivered: clients reading ended runs' streams (from the Postgres mirror) "
        "back to back, each with its own key.",
    ]
    browser = results.get("browser") or {}
    if "skipped" in browser:
        parts.append(f"Chromium: not measured ({browser['skipped']}).")
    for stage, error in (results.get("errors") or {}).items():
        parts.append(f"{stage} did not finish: {error}")
    return "\n\n".join(parts)


async def run(cfg: Config) -> dict[str, Any]:
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": asdict(cfg),
        "machine": machine_info(),
        "note": cfg.note,
    }
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
            results["machine"]["postgres"] = f"PostgreSQL {row[0] if row else '?'} (pgserver)"
        log(f"stack up in {time.monotonic() - t0:.1f}s at {home}")
        results.update(
            await measure(cfg, endpoints["temporal_address"], endpoints["database_url"], home)
        )
    finally:
        await asyncio.to_thread(stack.stop)
        shutil.rmtree(home, ignore_errors=True)
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
    args = parser.parse_args(argv)
    cfg = replace(QUICK if args.quick else FULL, note=args.note)
    results = asyncio.run(run(cfg))
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
