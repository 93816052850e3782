"""Advice in every message works in one hop, followed mechanically: every `agentledger ...` or
`agentledger-worker ...` command a message of the package tells a person to run parses with
the console scripts' own parsers (placeholders such as RUN, NAME or a value the message fills
in stand for any value of the right type), every install command names an extra of
pyproject.toml that brings the missing module, and every AGENTLEDGER_ variable a message names
is a setting, set to a value it takes where the message gives one.

No stack: the messages are read from the source (string literals and f-strings, docstrings
and comments left out). The advice that needs a stack to follow is followed there:
tests/test_waiting_runs.py starts the advised worker, which serves the run that waited for
it; tests/test_plugin_app.py sets AGENTLEDGER_CODEC as a sealed payload's message says, and
every payload-reading command then reads the run; tests/test_cli_exit_codes.py checks the
one install command a missing extra names.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import itertools
import re
import shlex
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from agentledger.cli.main import COMMANDS, LOCAL
from agentledger.cli.main import parser as cli_parser
from agentledger.core import advice, extras
from agentledger.core.config import _NAMES, AgentLedgerConfig
from agentledger.core.constants import TASK_QUEUE
from agentledger.core.http_config import HTTP_NAMES
from agentledger.worker.main import parser as worker_parser

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentledger"
# Where an f-string's value is part of a word (a flag's name, the command itself), what it
# is in the message; any other value stands for whatever the message fills in.
WORD_VALUES = {"limit.period": "day", "self.command": "up"}
HOLE = "VALUE"
# Keyword arguments that describe a thing: a command named there (`agentledger say`) names
# it, and is not advice to run it as it stands.
DESCRIBING = {"description", "help", "__doc__"}
# A word a person replaces: RUN, NAME, PKG.MODULE:ATTR, "...", a value the code fills in.
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:[.:][A-Z][A-Z0-9_]*)*|\.\.\.|%s|%d)$")
# What a placeholder is tried as, in turn, until the parser takes the command.
TRIED_AS = ("1", "approver", "any")
COMMAND = re.compile(r"^(?:[A-Z][A-Z0-9_]*=\S+ )*agentledger(?:-worker)?(?: |$)")
# A command said without backticks ("approve: agentledger approve RUN --by NAME"): after a
# colon, up to the end of its words.
BARE_COMMAND = re.compile(r"(?<=: )agentledger(?:-worker)?(?: [^\s`()]+)+")
VARIABLE = re.compile(r"\bAGENTLEDGER_[A-Z0-9_]*[A-Z0-9]\b")
ASSIGNMENT = re.compile(r"\b(AGENTLEDGER_[A-Z0-9_]+)=([^\s`;,)]+)")


def message_strings(*, described: bool = True) -> list[tuple[str, str]]:
    """Every string the package's code holds, as `path:line` and its text, an f-string's
    values as WORD_VALUES has them or HOLE; docstrings are not messages, and descriptions
    (of a field, a flag, a model) only with `described`."""
    return [(where, text) for where, text, describes in _strings() if described or not describes]


@functools.cache
def _strings() -> tuple[tuple[str, str, bool], ...]:
    """Read once, when a test first asks (not as the module is collected)."""
    return tuple(_read_strings())


def _read_strings() -> Iterator[tuple[str, str, bool]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        skipped: set[int] = set()
        describing: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg in DESCRIBING:
                describing.add(id(node.value))
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                skipped.add(id(body[0].value))  # a docstring
            if isinstance(node, ast.JoinedStr):
                skipped.update(id(part) for part in node.values)  # its pieces, read whole
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield where, node.value, id(node) in describing
            elif isinstance(node, ast.JoinedStr):
                text = "".join(_piece(part) for part in node.values)
                yield where, text, id(node) in describing


def _piece(part: ast.expr) -> str:
    if isinstance(part, ast.Constant):
        return str(part.value)
    assert isinstance(part, ast.FormattedValue)
    return WORD_VALUES.get(ast.unparse(part.value), HOLE)


@functools.cache
def advised_commands() -> list[tuple[str, str]]:
    """Each command a message advises, with where it is said; the advice module's own
    commands as it makes them, for the default queue and another."""
    found = [
        (where, command)
        for where, text in message_strings(described=False)
        if not where.startswith("agentledger/core/advice.py")
        for command in [
            *(c for c in re.findall(r"`([^`\n]+)`", text) if COMMAND.match(c)),
            *BARE_COMMAND.findall(text),
        ]
    ]
    for queue in (TASK_QUEUE, "other-queue"):
        made = advice.worker_command(queue)
        said = [c for c in re.findall(r"`([^`]+)`", made) if COMMAND.match(c)]
        found += [(f"advice.worker_command({queue!r})", c) for c in said]
    return found


def parses(command: str) -> str | None:
    """None if the console script's parser takes `command` (with its placeholders filled
    in some way), else what the parser said."""
    words = shlex.split(command)
    while "=" in words[0]:  # a variable set for the command alone
        words = words[1:]
    program, args = words[0], words[1:]
    holes = [i for i, word in enumerate(args) if PLACEHOLDER.match(word)]
    said = ""
    for values in itertools.product(TRIED_AS, repeat=len(holes)):
        filled = list(args)
        for i, value in zip(holes, values, strict=True):
            filled[i] = value
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                if program == "agentledger-worker":
                    worker_parser().parse_args(filled)
                    return None
                parsed = cli().parse_args(filled)
        except SystemExit as exit:
            if exit.code == 0:  # --help
                return None
            said = err.getvalue().strip().splitlines()[-1]
            continue
        if parsed.command not in COMMANDS and parsed.command not in LOCAL:
            return f"{parsed.command} has no handler"
        return None
    return said


cli = functools.cache(cli_parser)


def test_advice_is_found_where_it_is_given() -> None:
    """The scan reads the messages (a guard against a scan that finds nothing)."""
    advised = advised_commands()
    places = {where.split(":")[0] for where, _ in advised}
    assert len(advised) > 60, advised
    assert sum(where.startswith("advice.") for where, _ in advised) == 2, advised
    for module in ("agentledger/client/steering.py", "agentledger/cli/render.py"):
        assert module in places, sorted(places)


def test_every_described_command_is_one() -> None:
    """A description names commands that exist (`agentledger say`), whole or not."""
    named = {
        (where, command)
        for where, text in message_strings()
        for command in re.findall(r"`([^`\n]+)`", text)
        if COMMAND.match(command)
    }
    wrong = []
    for where, command in sorted(named):
        words = shlex.split(command)[1:]
        group = cli()
        for word in words:
            if word.startswith("-") or PLACEHOLDER.match(word):
                break
            choices = next((a.choices for a in group._actions if isinstance(a.choices, dict)), None)
            if choices is None:
                break
            if word not in choices:
                wrong.append(f"{where}: `{command}`: no command {word!r}")
                break
            group = choices[word]
    assert not wrong, wrong


def test_every_advised_command_parses_as_written() -> None:
    wrong = [
        f"{where}: `{command}`: {said}"
        for where, command in advised_commands()
        if (said := parses(command)) is not None
    ]
    assert not wrong, "advice that does not run as written:\n" + "\n".join(wrong)


def test_the_advised_worker_command_serves_tools_of_its_own() -> None:
    """A worker with no tools refuses to start, so the advised command names them."""
    for queue in (TASK_QUEUE, "other-queue"):
        [command, *_] = re.findall(r"`([^`]+)`", advice.worker_command(queue))
        args = worker_parser().parse_args(shlex.split(command)[1 if queue == TASK_QUEUE else 2 :])
        assert args.demo or args.tools, command
        if queue != TASK_QUEUE:
            assert command.startswith(f"AGENTLEDGER_TASK_QUEUE={queue} "), command


installed_distributions = functools.cache(packages_distributions)


def extras_of_pyproject() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        extra: [Requirement(text) for text in requirements]
        for extra, requirements in project["optional-dependencies"].items()
    }


def distributions_of(extra: str, extras: dict[str, list[Requirement]]) -> set[str]:
    """The distributions `extra` installs, through the extras of ours it names."""
    found: set[str] = set()
    for requirement in extras[extra]:
        if requirement.name == "agentledger":
            for inner in requirement.extras:
                found |= distributions_of(inner, extras)
        else:
            found.add(requirement.name.lower().replace("_", "-"))
    return found


@pytest.mark.parametrize("module", sorted(extras.EXTRA_OF_MODULE))
def test_each_install_command_names_the_extra_that_brings_the_module(module: str) -> None:
    extra = extras.EXTRA_OF_MODULE[module]
    known = extras_of_pyproject()
    assert extra in known, f"{module}: no extra {extra!r} in pyproject.toml"
    command = extras.install_command(extra)
    assert re.fullmatch(rf"pip install (?:-e )?'[^']*\[{extra}\]'", command), command
    providers = {
        name.lower().replace("_", "-") for name in installed_distributions().get(module, [])
    }
    if providers:  # installed here: the extra is what installs it
        assert providers & distributions_of(extra, known), (module, extra, providers)


def test_every_variable_a_message_names_is_a_setting() -> None:
    settings = _NAMES | HTTP_NAMES
    unknown = sorted(
        {
            f"{where}: {name}"
            for where, text in message_strings()
            if not VARIABLE.fullmatch(text)  # a name alone is a constant, not a message
            for name in VARIABLE.findall(text)
            if name not in settings
        }
    )
    assert not unknown, unknown


def test_every_value_a_message_sets_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """`set AGENTLEDGER_X=value`: the settings load with it (a placeholder is any value)."""
    assigned = {
        (name, value)
        for _, text in message_strings()
        for name, value in ASSIGNMENT.findall(text)
        if not PLACEHOLDER.match(value) and value != HOLE
    }
    assert ("AGENTLEDGER_SEARCH_ATTRIBUTES", "0") in assigned, assigned
    for name, value in sorted(assigned):
        with monkeypatch.context() as env:
            env.setenv(name, value)
            AgentLedgerConfig.load()
