"""`agentledger completion bash|zsh`: a completion script made from the parser itself.

The script holds, for each command path (`""`, `"/backlog"`, `"/backlog/enqueue"`), the words
that may come next (subcommands, flags, a positional's choices) and, for each flag with
choices, those choices; so it never falls behind the commands and needs no dependency.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _table(
    p: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, list[str], dict[str, list[str]]]]:
    """(command path, words that may follow it, choices of each of its flags), depth first."""
    children = _subcommands(p)
    words = list(children)
    flag_choices: dict[str, list[str]] = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        choices = [str(c) for c in action.choices] if action.choices is not None else []
        if action.option_strings:
            words += [o for o in action.option_strings if o.startswith("--")]
            for option in action.option_strings:
                if choices:
                    flag_choices[option] = choices
        else:
            words += choices
    yield path, words, flag_choices
    for name, child in children.items():
        yield from _table(child, f"{path}/{name}")


def _cases(table: list[tuple[str, list[str], dict[str, list[str]]]], zsh: bool) -> str:
    """The shell's `case` arms: flag choices first (by path and previous word), then words."""
    open_paren = "(" if zsh else ""
    arms = []
    for path, _, flags in table:
        for flag, choices in flags.items():
            arms.append(
                f'        {open_paren}"{path} {flag}") choices={shlex.quote(" ".join(choices))} ;;'
            )
    for path, words, _ in table:
        arms.append(f'        {open_paren}"{path} "*) choices={shlex.quote(" ".join(words))} ;;')
    return "\n".join(arms)


def _commands(table: list[tuple[str, list[str], dict[str, list[str]]]], zsh: bool) -> str:
    """The `case` pattern that recognises a word as the next command on the path."""
    paths = [path for path, _, _ in table if path]
    return ("(" if zsh else "") + "|".join(f'"{p}"' for p in paths) + ")"


BASH = """# agentledger completion for bash: `source <(agentledger completion bash)`, or save it to
# ~/.local/share/bash-completion/completions/agentledger
_agentledger() {
    local cur prev word path choices i
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    path=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        case "$path/$word" in
        COMMANDS path="$path/$word" ;;
        esac
    done
    choices=""
    case "$path $prev" in
CASES
    esac
    COMPREPLY=($(compgen -W "$choices" -- "$cur"))
}
complete -o default -F _agentledger agentledger
"""

ZSH = """#compdef agentledger
# agentledger completion for zsh: save it as _agentledger in a folder on $fpath, or
# `source <(agentledger completion zsh)` after compinit
_agentledger() {
    local word cmdpath choices i
    cmdpath=""
    for ((i = 2; i < CURRENT; i++)); do
        word="${words[i]}"
        case "$cmdpath/$word" in
        COMMANDS cmdpath="$cmdpath/$word" ;;
        esac
    done
    choices=""
    case "$cmdpath ${words[CURRENT-1]}" in
CASES
    esac
    compadd -- ${=choices}
}
if [[ "${zsh_eval_context[-1]}" == loadautofunc ]]; then
    _agentledger "$@"
else
    compdef _agentledger agentledger
fi
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` ("bash" or "zsh")."""
    table = list(_table(parser))
    zsh = shell == "zsh"
    template = ZSH if zsh else BASH
    return template.replace("COMMANDS", _commands(table, zsh)).replace("CASES", _cases(table, zsh))
