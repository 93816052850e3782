"""docker-compose.yml against the published Compose schema, and what agentledger needs of it.

No Docker engine is needed: the file is validated with `jsonschema` against the Compose
Specification's own schema (tests/schemas/compose-spec.json, its source named beside it);
the checks after that cover what a schema cannot: references between services, the
supported Temporal images, the setup steps and the dynamic config agentledger relies on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agentledger.core import search_attributes

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).parent / "schemas" / "compose-spec.json"
# The Web UI the `temporal` dev server ships (FACTS.md): the cluster's is no older.
DEV_SERVER_UI = (2, 54)


# `${VAR}` or `${VAR:-default}`, not `$${...}` (a `$` escaped for the container's shell).
VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?::-([^}]*))?\}")


def read_compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The file as `docker compose` reads it in an environment holding `env` alone."""
    text = (REPO_ROOT / "docker-compose.yml").read_text()
    given = env or {}
    return dict(yaml.safe_load(VARIABLE.sub(lambda m: given.get(m[1], m[2] or ""), text)))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return read_compose()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return dict(compose["services"])


def image_tag(service: dict[str, Any]) -> tuple[str, str]:
    name, _, tag = str(service["image"]).partition(":")
    return name, tag


def test_valid_against_the_published_compose_schema(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.path)
    )
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_the_schema_catches_a_broken_file(compose: dict[str, Any]) -> None:
    """The validation above can fail: a misspelt key and a bad condition are refused."""
    schema = json.loads(SCHEMA.read_text())
    broken = json.loads(json.dumps(compose))
    broken["services"]["worker"]["depends_on"]["model"]["condition"] = "service_ready"
    broken["services"]["temporal"]["helthcheck"] = {}
    messages = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(broken)]
    assert any("service_ready" in m for m in messages)
    assert any("helthcheck" in m for m in messages)


def test_references_between_services_resolve(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    volumes, configs = set(compose.get("volumes") or {}), set(compose.get("configs") or {})
    for name, service in services.items():
        for dependency, rule in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on undefined {dependency}"
            if rule.get("condition") == "service_healthy":
                assert services[dependency].get("healthcheck"), f"{dependency} has no healthcheck"
        for volume in service.get("volumes") or []:
            source = str(volume).partition(":")[0]
            assert source.startswith((".", "/")) or source in volumes, f"{name}: {source}"
        for config in service.get("configs") or []:
            assert config["source"] in configs, f"{name}: undeclared config {config['source']}"


def test_temporal_runs_on_supported_images(services: dict[str, Any]) -> None:
    images = {name: image_tag(service) for name, service in services.items() if "image" in service}
    assert all(image != "temporalio/auto-setup" for image, _ in images.values())
    server_image, server_version = images["temporal"]
    assert server_image == "temporalio/server"
    assert tuple(int(p) for p in server_version.split(".")[:2]) >= (1, 32)
    one_shots = {
        name
        for name, (image, tag) in images.items()
        if image == "temporalio/admin-tools" and tag == server_version
    }
    assert {"temporal-schema", "temporal-setup"} <= one_shots, "setup matches the server version"
    waits = services["temporal"]["depends_on"]["temporal-schema"]["condition"]
    assert waits == "service_completed_successfully"
    ui_image, ui_version = images["temporal-ui"]
    assert ui_image == "temporalio/ui"
    assert tuple(int(p) for p in ui_version.split(".")[:2]) >= DEV_SERVER_UI


def test_schema_setup_creates_both_databases(services: dict[str, Any]) -> None:
    script = "\n".join(services["temporal-schema"]["command"])
    assert "setup temporal temporal" in script
    assert "setup temporal_visibility visibility" in script
    assert "update-schema" in script


def test_setup_registers_the_search_attributes_runs_use(services: dict[str, Any]) -> None:
    script = "\n".join(services["temporal-setup"]["command"])
    pairs = re.search(r"for name in ([^;]+);", script).group(1).split()  # type: ignore[union-attr]
    registered = dict(pair.split(":") for pair in pairs)
    assert registered == {
        key.name: key.indexed_value_type.name.title() for key in search_attributes.ALL
    }
    assert "namespace create -n default" in script
    worker_waits = services["worker"]["depends_on"]["temporal-setup"]["condition"]
    assert worker_waits == "service_completed_successfully"


def test_dynamic_config_turns_fairness_on(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    mount = services["temporal"]["configs"][0]
    config = yaml.safe_load(compose["configs"][mount["source"]]["content"])
    assert config["matching.enableFairness"] == [{"value": True}]
    assert config["matching.numTaskqueueReadPartitions"] == [{"value": 1}]
    assert config["matching.numTaskqueueWritePartitions"] == [{"value": 1}]
    path = services["temporal"]["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    assert mount["target"] == f"/etc/temporal/{path}"


def test_workers_reach_the_cluster_and_the_mirror(services: dict[str, Any]) -> None:
    env = services["worker"]["environment"]
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    receipts = services["receipts-db"]["environment"]
    user, password, db = (
        receipts[k] for k in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB")
    )
    assert env["DATABASE_URL"] == f"postgresql://{user}:{password}@receipts-db:5432/{db}"
    assert "http://model:8000/v1" in env["OPENAI_BASE_URL"]
    assert int(services["worker"]["deploy"]["replicas"]) >= 2
    assert "ports" not in services["worker"], "replicas would collide on a host port"


def test_built_services_run_files_the_image_copies(services: dict[str, Any]) -> None:
    copied = {
        part.rstrip("/")
        for line in (REPO_ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
        for part in line.split()[1:-1]
    }
    for source in copied:
        assert (REPO_ROOT / source).exists(), f"the Dockerfile copies missing {source}"
    for name in ("worker", "model"):
        argv = services[name]["command"]
        target = argv[2] if argv[1] == "-m" else argv[1]
        path = target.replace(".", "/") + ".py" if argv[1] == "-m" else target
        assert (REPO_ROOT / path).is_file(), f"{name} runs missing {path}"
        assert path in copied or path.split("/")[0] in copied, f"{path} is not in the image"


def test_traces_go_through_a_collector_to_jaeger(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    """Workers export OTLP to the collector; the collector's trace pipeline ends in Jaeger,
    which takes OTLP itself; its metrics pipeline scrapes every worker replica's endpoint."""
    env = services["worker"]["environment"]
    assert env["AGENTLEDGER_OTEL"] == "1"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert services["worker"]["depends_on"]["otel-collector"]["condition"] == "service_started"
    collector = services["otel-collector"]
    assert image_tag(collector)[0] == "otel/opentelemetry-collector-contrib"
    mount = collector["configs"][0]
    assert collector["command"] == [f"--config={mount['target']}"]
    config = yaml.safe_load(compose["configs"][mount["source"]]["content"])
    assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    traces = config["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp"]
    (exporter,) = traces["exporters"]
    assert config["exporters"][exporter]["endpoint"] == "jaeger:4317"
    jaeger = services["jaeger"]
    assert image_tag(jaeger)[0] == "jaegertracing/all-in-one"
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert "127.0.0.1:16686:16686" in jaeger["ports"], "the trace viewer's UI"
    for pipeline in config["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(kind, [])) <= set(config[kind]), f"undeclared {kind}"


def test_the_collector_scrapes_every_worker_for_metrics(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    bind = services["worker"]["environment"]["AGENTLEDGER_PROMETHEUS_BIND"]
    host, _, port = bind.rpartition(":")
    assert host == "0.0.0.0", "reachable from the collector, not loopback only"
    mount = services["otel-collector"]["configs"][0]
    config = yaml.safe_load(compose["configs"][mount["source"]]["content"])
    (job,) = config["receivers"]["prometheus"]["config"]["scrape_configs"]
    (discovery,) = job["dns_sd_configs"]
    assert discovery["names"] == ["worker"] and discovery["port"] == int(port)
    metrics = config["service"]["pipelines"]["metrics"]
    assert "prometheus" in metrics["receivers"]
    served = config["exporters"][metrics["exporters"][0]]["endpoint"]
    port = served.rpartition(":")[2]
    assert f"127.0.0.1:{port}:{port}" in services["otel-collector"]["ports"]


def test_the_image_has_the_otel_extra() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert '-c constraints.txt ".[otel]"' in dockerfile


def published(services: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """Each published port by its container port: (host address, host port, container port)."""
    found = {}
    for name, service in services.items():
        for entry in service.get("ports") or []:
            host, port, inside = str(entry).split(":")
            found[f"{name}:{inside}"] = (host, port, inside)
    return found


def test_every_port_is_published_on_loopback_unless_asked() -> None:
    ports = published(read_compose()["services"])
    assert len(ports) == 8
    assert {host for host, _, _ in ports.values()} == {"127.0.0.1"}
    everywhere = published(read_compose({"AGENTLEDGER_BIND": "0.0.0.0"})["services"])
    assert {host for host, _, _ in everywhere.values()} == {"0.0.0.0"}


def test_each_host_port_comes_from_a_variable_of_its_own() -> None:
    raw = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    variables = []
    for name, service in raw.items():
        for entry in service.get("ports") or []:
            match = re.fullmatch(
                r"\$\{AGENTLEDGER_BIND:-127\.0\.0\.1\}:\$\{(AGENTLEDGER_\w+_PORT):-(\d+)\}:(\d+)",
                entry,
            )
            assert match, f"{name}: {entry} is not published on AGENTLEDGER_BIND from a variable"
            variables.append(match[1])
            moved = published(read_compose({match[1]: "40999"})["services"])
            assert moved[f"{name}:{match[3]}"] == ("127.0.0.1", "40999", match[3])
    assert len(set(variables)) == len(variables), variables
    header = (REPO_ROOT / "docker-compose.yml").read_text().split("services:")[0]
    assert all(v in header for v in variables), "the file's header lists each port variable"


def test_the_passwords_come_from_variables() -> None:
    services = read_compose(
        {"AGENTLEDGER_PG_PASSWORD": "s3cret", "AGENTLEDGER_TEMPORAL_PG_PASSWORD": "t3mporal"}
    )["services"]
    assert services["receipts-db"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"
    url = services["worker"]["environment"]["DATABASE_URL"]
    assert url == "postgresql://agentledger:s3cret@receipts-db:5432/agentledger"
    assert services["temporal-db"]["environment"]["POSTGRES_PASSWORD"] == "t3mporal"
    for name in ("temporal", "temporal-schema"):
        env = services[name]["environment"]
        assert env["POSTGRES_PWD"] == env["SQL_PASSWORD"] == "t3mporal", name
    raw = (REPO_ROOT / "docker-compose.yml").read_text()
    literal = re.findall(r"(?:PASSWORD|PWD): (?!\$\{)\S+", raw)
    assert not literal, f"passwords written in the file: {literal}"
