"""`agentledger eval dataset` and `agentledger eval run`: recorded runs as a dataset, replayed to a
candidate profile, scored, and gated."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from agentledger.cli.cli_options import add_output_flags, add_wait, count, emit

if TYPE_CHECKING:
    from agentledger import RunClient
    from agentledger.core.eval_reports import EvalGate, EvalReport


def add_commands(sub: Any) -> None:
    """Add the `eval` command group to the top-level subparsers."""
    group = sub.add_parser("eval", help="prove a new agent version on recorded runs")
    commands = group.add_subparsers(dest="eval_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = commands.add_parser(name, help=help, description=help)
        add_output_flags(p)
        add_wait(p)
        return p

    p = command("dataset", "write a pydantic-evals dataset of finished runs, one case each")
    p.add_argument("-o", "--output", required=True, help="the dataset file: .yaml or .json")
    p.add_argument("--agent", help="only this agent's runs")
    p.add_argument("--outcome", help="only runs that ended so: completed, failed, cancelled")
    p.add_argument("--since", help="runs started since: an ISO date, or an age like 24h, 7d")
    p.add_argument("--until", help="runs started before: an ISO date, or an age like 24h, 7d")
    p.add_argument("--runs", help="a file of run ids, one a line (instead of the filters)")
    p.add_argument("--limit", type=count, default=1000, help="at most this many (default 1000)")
    p = command("run", "replay a dataset's cases to a candidate profile and score it")
    p.add_argument("dataset", help="the dataset file `eval dataset` wrote")
    add_candidate(p)
    add_gate(p)
    p.add_argument("--html", help="also write a self-contained HTML report to this file")
    p.add_argument(
        "--progress", action="store_true", help="a progress line on stderr even when not a TTY"
    )


def add_candidate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidate", help="the agent profile to prove (by name)")
    p.add_argument(
        "--agents",
        help="where profiles live: a YAML file or PKG.MODULE:ATTR (default AGENTLEDGER_AGENTS)",
    )
    p.add_argument(
        "--live-read-only",
        action="store_true",
        help="past a divergence, let tools without side effects run live (default: stop)",
    )
    p.add_argument("--concurrency", type=count, default=4, help="cases at once (default 4)")


def add_gate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-pass-rate", type=float, help="fail the gate below this share (0..1)")
    p.add_argument("--max-cost-ratio", type=float, help="fail above candidate/baseline cost")
    p.add_argument("--max-token-ratio", type=float, help="fail above candidate/baseline tokens")
    p.add_argument("--max-diverged", type=int, help="fail above this many divergent cases")


async def dispatch(client: RunClient, args: argparse.Namespace) -> int:
    if args.eval_command == "dataset":
        return await dataset(client, args)
    report = await run(client, args, args.dataset)
    return report_exit(report, args)


async def dataset(client: RunClient, args: argparse.Namespace) -> int:
    from pathlib import Path

    from agentledger.core.errors import InvalidRequest
    from agentledger.core.periods import parse_point

    points = {}
    for flag in ("since", "until"):
        try:
            points[flag] = parse_point(getattr(args, flag)) if getattr(args, flag) else None
        except ValueError as err:
            raise InvalidRequest(f"--{flag}: {err}") from err
    run_ids = read_run_ids(args.runs) if args.runs else None
    if Path(args.output).suffix.lower() not in (".yaml", ".yml", ".json"):
        raise InvalidRequest(f"-o {args.output}: name a .yaml or .json file")
    cases = await client.evals.dataset(
        args.output,
        run_ids=run_ids,
        agent=args.agent,
        outcome=args.outcome,
        since=points["since"],
        until=points["until"],
    )
    emit({"dataset": args.output, "cases": cases}, args.json, f"{cases} case(s) in {args.output}")
    return 0


def read_run_ids(path: str) -> list[str]:
    """A file of run ids, one a line; blank lines and `#` comments left out."""
    from pathlib import Path

    from agentledger.core.errors import InvalidRequest

    try:
        lines = [line.strip() for line in Path(path).read_text().splitlines()]
    except OSError as err:
        raise InvalidRequest(f"--runs {path}: {err.strerror}") from err
    return [r for r in lines if r and not r.startswith("#")]


def gate_of(args: argparse.Namespace) -> EvalGate:
    from pydantic import ValidationError

    from agentledger.core.errors import InvalidRequest
    from agentledger.core.eval_reports import EvalGate

    try:
        return EvalGate(
            min_pass_rate=args.min_pass_rate,
            max_cost_ratio=args.max_cost_ratio,
            max_token_ratio=args.max_token_ratio,
            max_diverged=args.max_diverged,
        )
    except ValidationError as err:
        problems = "; ".join(f"--{e['loc'][0]}: {e['msg']}".replace("_", "-") for e in err.errors())
        raise InvalidRequest(problems) from None


async def run(client: RunClient, args: argparse.Namespace, path: str) -> EvalReport:
    """The eval, with a progress line on stderr (a TTY's, or when asked)."""
    from agentledger import profiles
    from agentledger.core.errors import InvalidRequest

    if not args.candidate:
        raise InvalidRequest("name the agent profile to prove: --candidate NAME")
    source = args.agents or client.config.agents or "agentledger.demo:agents"
    agents = profiles.load_agents(source)
    candidate = profiles.pick(agents, args.candidate, source)
    gate = gate_of(args)
    shows = (sys.stderr.isatty() or getattr(args, "progress", False)) and not args.json

    def progress(line: str) -> None:
        if shows:
            print(f"\reval: {line}", end="", file=sys.stderr)

    report = await client.evals.run(
        path,
        candidate=candidate,
        agents=agents,
        live_read_only=args.live_read_only,
        concurrency=args.concurrency,
        gate=gate,
        on_progress=progress,
    )
    if shows:
        print(file=sys.stderr)
    return report


async def with_replay(
    client: RunClient, args: argparse.Namespace, replayed: dict[str, Any], replay_text: str
) -> int:
    """`deploy check --eval`: the determinism replay's verdict and the eval's, together; exit
    1 when the replay fails (it matters first), else the gate's code."""
    from agentledger.cli import eval_render
    from agentledger.core.eval_reports import GATE_FAILED

    report = await run(client, args, args.eval)
    emit(
        {"replay": replayed, "eval": report.json_view()},
        args.json,
        f"{replay_text}\n{eval_render.text(report)}",
    )
    if not replayed["passed"]:
        return 1
    return 0 if report.passed_gate else GATE_FAILED


def report_exit(report: EvalReport, args: argparse.Namespace) -> int:
    """Print the report (and write its HTML); the gate's exit code."""
    from agentledger.cli import eval_render
    from agentledger.core.eval_reports import GATE_FAILED

    if getattr(args, "html", None):
        eval_render.write_html(report, args.html)
    emit(report.json_view(), args.json, eval_render.text(report))
    return 0 if report.passed_gate else GATE_FAILED
