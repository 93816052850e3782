"""AgentLedgerConfig: one typed object, one boolean syntax, errors that name the variable.

Each AGENTLEDGER_* variable is declared once on `agentledger.AgentLedgerConfig`; these tests
hold the promises people rely on when they set one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentledger.core.config import AgentLedgerConfig, write_stack_file
from agentledger.core.constants import DEFAULT_TEMPORAL_ADDRESS, DEFAULT_WEB_UI
from agentledger.core.errors import SetupError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        *[("1", True), ("true", True), ("yes", True), ("on", True), ("TRUE", True)],
        *[("0", False), ("false", False), ("no", False), ("off", False)],
    ],
)
def test_every_boolean_reads_the_same_syntax(raw, expected):
    for name, field in (
        ("AGENTLEDGER_SEARCH_ATTRIBUTES", "search_attributes"),
        ("AGENTLEDGER_OTEL", "otel"),
    ):
        assert getattr(AgentLedgerConfig.load({name: raw}), field) is expected, (name, raw)


def test_an_empty_variable_counts_as_unset():
    loaded = AgentLedgerConfig.load(
        {"AGENTLEDGER_SEARCH_ATTRIBUTES": "", "AGENTLEDGER_OTEL": "", "AGENTLEDGER_MODEL": ""}
    )
    assert loaded.search_attributes is True and loaded.otel is False
    assert loaded.model == AgentLedgerConfig.load({}).model


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("AGENTLEDGER_SEARCH_ATTRIBUTES", "maybe"),
        ("AGENTLEDGER_PAYLOAD_LIMIT_BYTES", "2MB"),
        ("AGENTLEDGER_RETENTION_DAYS", "a month"),
    ],
)
def test_a_value_that_does_not_parse_names_its_variable(name, raw):
    with pytest.raises(SetupError, match=f"invalid setting: {name}"):
        AgentLedgerConfig.load({name: raw})


def test_the_environment_first_then_the_stack_file_then_defaults(tmp_path):
    home = tmp_path / "home"
    assert (
        AgentLedgerConfig.load({"AGENTLEDGER_HOME": str(home)}).temporal_address
        == DEFAULT_TEMPORAL_ADDRESS
    )
    write_stack_file(
        home,
        {
            "temporal_address": "127.0.0.1:17233",
            "web_ui_url": "http://127.0.0.1:18233",
            "database_url": "postgresql://stack/db",
        },
    )
    from_stack = AgentLedgerConfig.load({"AGENTLEDGER_HOME": str(home)})
    assert from_stack.temporal_address == "127.0.0.1:17233"
    assert from_stack.web_ui_url == "http://127.0.0.1:18233"
    assert from_stack.database_url == "postgresql://stack/db"
    overridden = AgentLedgerConfig.load(
        {
            "AGENTLEDGER_HOME": str(home),
            "AGENTLEDGER_WEB_UI": DEFAULT_WEB_UI,
            "DATABASE_URL": "postgresql://env/db",
        }
    )
    assert overridden.web_ui_url == DEFAULT_WEB_UI
    assert overridden.database_url == "postgresql://env/db"


def test_a_given_mapping_replaces_the_environment(monkeypatch):
    monkeypatch.setenv("AGENTLEDGER_TASK_QUEUE", "from-the-environment")
    assert AgentLedgerConfig.load().task_queue == "from-the-environment"
    assert AgentLedgerConfig.load({}).task_queue != "from-the-environment"


def test_the_local_ports_are_defined_once():
    """7233 and 8233 appear in agentledger/core/constants.py alone among the code (compose and
    docs name them for people)."""
    sources = [*ROOT.glob("agentledger/**/*.py"), ROOT / "starter.py", ROOT / "worker.py"]
    found = [
        str(path.relative_to(ROOT))
        for path in sources
        if re.search(r"\b(7233|8233)\b", path.read_text())
    ]
    assert found == ["agentledger/core/constants.py"]
