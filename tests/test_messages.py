"""Each intent people send a workflow is one update with a validator, named once in a typed
message table (agentledger/core/messages.py); its kept form, the signal sent while no worker
answers, is routed by the same table to the same component, so no intent has two handlers
and the client names no update or signal by a string of its own."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from agentledger.core import constants as names
from agentledger.core.messages import BacklogMessages, Message, MessageTable, RunMessages
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.backlog import AgentBacklogWorkflow
from tests.support import parse_python

ROOT = Path(__file__).resolve().parent.parent
# Signals one workflow sends another (a workflow cannot send an update): not people's intents.
BETWEEN_WORKFLOWS = {names.SIGNAL_RUN_ADMIT, names.SIGNAL_CHILD_APPROVAL}


def definition(workflow: type) -> Any:
    return getattr(workflow, "__temporal_workflow_definition")


def messages_of(kind: type) -> list[Message]:
    return [value for value in vars(kind).values() if isinstance(value, Message)]


@pytest.mark.parametrize(
    ("workflow", "table"),
    [(AgentRunWorkflow, RunMessages), (AgentBacklogWorkflow, BacklogMessages)],
)
def test_each_intent_is_one_update_with_a_validator_and_its_kept_form_one_handler(
    workflow: type, table: type
):
    defn = definition(workflow)
    intents = messages_of(table)
    updates = {m.update for m in intents if m.update is not None}
    assert updates <= set(defn.updates), "every intent's update is registered"
    assert all(defn.updates[name].validator is not None for name in updates), "with a validator"
    kept = {m.signal for m in intents if m.signal is not None}
    named = set(defn.signals) - {None}
    assert not kept & named, "a kept form has no handler of its own: `kept` routes it"
    assert named <= BETWEEN_WORKFLOWS, f"a signal handler that is not an intent's: {named}"
    assert defn.signals[None].fn.__name__ == "kept", "one handler for every kept form"
    table_of: MessageTable = table.TABLE
    assert all(table_of.kept(signal) is not None for signal in kept)
    assert table_of.kept("no such signal") is None


def test_an_intent_without_its_other_form_says_which_to_send():
    assert RunMessages.SAY.update is None and RunMessages.SAY.kept_signal == names.SIGNAL_SAY
    with pytest.raises(ValueError, match="only ever kept"):
        RunMessages.SAY.update_name  # noqa: B018


def test_the_client_names_no_update_or_signal_of_its_own():
    """The client sends a `Message` (or, for a query, the workflow's own method): no name
    constant of an update or a signal appears on the client side."""
    constants = {name for name in vars(names) if name.startswith(("UPDATE_", "SIGNAL_"))}
    found = []
    for path in sorted((ROOT / "agentledger" / "client").glob("*.py")):
        for node in ast.walk(parse_python(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in constants:
                found.append(f"{path.name}:{node.lineno}: {node.attr}")
    assert not found, "send a Message from agentledger.core.messages:\n" + "\n".join(found)
