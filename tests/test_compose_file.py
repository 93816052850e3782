"""Structural checks for docker-compose.yml and the Dockerfile it builds.

No Docker engine is needed: the compose file is parsed with PyYAML and checked for
internal consistency (services, depends_on, volumes, ports, env wiring) and against
the files that actually exist in the repository.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPOSE_PATH = REPO_ROOT / "docker-compose.yml"

REQUIRED_SERVICES = {"temporal", "temporal-ui", "temporal-db", "receipts-db", "worker", "model"}
REQUIRED_WORKER_ENV = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "DATABASE_URL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
)

# ${VAR}, ${VAR:-default}, ${VAR-default}
_INTERP = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def compose() -> dict:
    assert COMPOSE_PATH.is_file(), f"docker-compose.yml not found at {COMPOSE_PATH}"
    data = yaml.safe_load(COMPOSE_PATH.read_text())
    assert isinstance(data, dict), "docker-compose.yml must be a YAML mapping at top level"
    services = data.get("services")
    assert isinstance(services, dict) and services, (
        "docker-compose.yml must have a non-empty top-level 'services' mapping"
    )
    return data


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def _env(service: dict) -> dict[str, str]:
    """Normalise `environment:` (mapping or list of KEY=VALUE) into a dict."""
    env = service.get("environment") or {}
    if isinstance(env, dict):
        return {str(k): "" if v is None else str(v) for k, v in env.items()}
    out: dict[str, str] = {}
    for item in env:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def _resolve_default(value: str) -> str:
    """Replace ${VAR:-default} with its default, as compose would with VAR unset."""
    return _INTERP.sub(lambda m: m.group("default") or "", value)


def _depends_on(service: dict) -> list[str]:
    deps = service.get("depends_on") or []
    if isinstance(deps, dict):
        return list(deps)
    return [str(d) for d in deps]


def _named_volumes_used(service: dict) -> list[str]:
    names = []
    for vol in service.get("volumes") or []:
        if isinstance(vol, dict):
            if vol.get("type", "volume") == "volume" and vol.get("source"):
                names.append(str(vol["source"]))
            continue
        source, sep, _ = str(vol).partition(":")
        if not sep:
            continue  # anonymous volume ("/data")
        if source.startswith((".", "/", "~", "$")):
            continue  # bind mount
        names.append(source)
    return names


def _published_ports(service: dict) -> list[tuple[str, int, int, str]]:
    """(host_ip, host_port, container_port, protocol) for every published port."""
    result = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            published = port.get("published")
            if published is None:
                continue
            result.append(
                (
                    str(port.get("host_ip", "")),
                    int(published),
                    int(port["target"]),
                    str(port.get("protocol", "tcp")),
                )
            )
            continue
        spec, _, proto = str(port).partition("/")
        parts = spec.rsplit(":", 2)
        if len(parts) == 1:
            continue  # container-only port, host port is ephemeral
        host_ip = parts[0] if len(parts) == 3 else ""
        host, container = parts[-2], parts[-1]
        if "-" in host:
            h_lo, h_hi = (int(x) for x in host.split("-"))
            c_lo = int(container.split("-")[0])
            for offset in range(h_hi - h_lo + 1):
                result.append((host_ip, h_lo + offset, c_lo + offset, proto or "tcp"))
        else:
            result.append((host_ip, int(host), int(container), proto or "tcp"))
    return result


def _build_context(service: dict) -> tuple[str, str] | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return build, "Dockerfile"
    return str(build.get("context", ".")), str(build.get("dockerfile", "Dockerfile"))


def _dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, args) pairs with line continuations joined and comments dropped."""
    joined: list[str] = []
    buf = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        joined.append(buf + line)
        buf = ""
    if buf:
        joined.append(buf)
    out = []
    for line in joined:
        instr, _, args = line.partition(" ")
        out.append((instr.upper(), args.strip()))
    return out


def _copy_sources(args: str) -> list[str] | None:
    """Sources of a COPY/ADD line, or None for multi-stage `--from=` copies."""
    if args.startswith("["):
        parts = json.loads(args)
    else:
        parts = shlex.split(args)
    flags = [p for p in parts if p.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return None
    rest = [p for p in parts if not p.startswith("--")]
    return rest[:-1]


def _command_argv(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = value.strip()
        if value.startswith("["):
            return [str(x) for x in json.loads(value)]
        return shlex.split(value)
    return [str(x) for x in value]


def _local_files_in_argv(argv: list[str]) -> list[str]:
    """Repo-relative paths a python command needs: script.py args and `-m pkg.mod`."""
    needed = []
    for i, arg in enumerate(argv):
        if arg.endswith(".py") and not arg.startswith("/"):
            needed.append(arg)
        if arg == "-m" and i + 1 < len(argv):
            needed.append(argv[i + 1])  # dotted module, resolved by caller
    return needed


def _module_exists(root: Path, dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (root / rel.with_suffix(".py")).is_file() or (root / rel / "__main__.py").is_file()


def _built_from_repo_root(services: dict) -> dict[str, tuple[str, str]]:
    out = {}
    for name, svc in services.items():
        ctx = _build_context(svc)
        if ctx and (REPO_ROOT / ctx[0]).resolve() == REPO_ROOT:
            out[name] = ctx
    return out


# ----------------------------------------------------------------------------- tests


def test_required_services_exist(services: dict) -> None:
    missing = REQUIRED_SERVICES - set(services)
    assert not missing, f"docker-compose.yml is missing required services: {sorted(missing)}"


def test_every_service_has_image_or_build(services: dict) -> None:
    for name, svc in services.items():
        assert isinstance(svc, dict), f"service '{name}' must be a mapping, got {svc!r}"
        assert svc.get("image") or svc.get("build"), (
            f"service '{name}' has neither 'image' nor 'build'"
        )


def test_depends_on_targets_are_defined(services: dict) -> None:
    for name, svc in services.items():
        for dep in _depends_on(svc):
            assert dep in services, (
                f"service '{name}' depends_on '{dep}', which is not a defined service"
            )
            assert dep != name, f"service '{name}' depends on itself"


def test_healthy_conditions_target_services_with_healthchecks(services: dict) -> None:
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if not isinstance(deps, dict):
            continue
        for dep, spec in deps.items():
            if isinstance(spec, dict) and spec.get("condition") == "service_healthy":
                assert dep in services and services[dep].get("healthcheck"), (
                    f"service '{name}' waits for '{dep}' to be service_healthy, "
                    f"but '{dep}' defines no healthcheck (it would never become healthy)"
                )


def test_named_volumes_are_declared(compose: dict, services: dict) -> None:
    declared = set((compose.get("volumes") or {}).keys())
    for name, svc in services.items():
        for vol in _named_volumes_used(svc):
            assert vol in declared, (
                f"service '{name}' uses named volume '{vol}', which is not declared under "
                f"the top-level 'volumes:' (declared: {sorted(declared)})"
            )


def test_databases_have_healthchecks_and_volumes(services: dict) -> None:
    for name in ("temporal-db", "receipts-db"):
        svc = services[name]
        test = json.dumps(svc.get("healthcheck", {}).get("test", ""))
        assert "pg_isready" in test, f"service '{name}' must have a pg_isready healthcheck"
        assert _named_volumes_used(svc), f"service '{name}' must keep its data in a named volume"


def test_worker_environment(services: dict) -> None:
    env = _env(services["worker"])
    missing = [k for k in REQUIRED_WORKER_ENV if k not in env]
    assert not missing, f"worker environment is missing: {missing}"

    temporal_addr = _resolve_default(env["TEMPORAL_ADDRESS"])
    host, _, port = temporal_addr.rpartition(":")
    assert host == "temporal", (
        f"worker TEMPORAL_ADDRESS should point at the 'temporal' service, got {temporal_addr!r}"
    )
    assert port == "7233", f"worker TEMPORAL_ADDRESS should use port 7233, got {temporal_addr!r}"

    db_url = urlparse(_resolve_default(env["DATABASE_URL"]))
    assert db_url.scheme.startswith("postgres"), (
        f"worker DATABASE_URL should be a postgresql:// URL, got {env['DATABASE_URL']!r}"
    )
    assert db_url.hostname == "receipts-db", (
        f"worker DATABASE_URL should point at the 'receipts-db' service, "
        f"got host {db_url.hostname!r}"
    )

    receipts_env = _env(services["receipts-db"])
    expected_db = receipts_env.get("POSTGRES_DB") or receipts_env.get("POSTGRES_USER")
    assert db_url.path.lstrip("/") == expected_db, (
        f"worker DATABASE_URL database {db_url.path.lstrip('/')!r} does not match "
        f"receipts-db POSTGRES_DB {expected_db!r}"
    )
    assert db_url.username == receipts_env.get("POSTGRES_USER"), (
        f"worker DATABASE_URL user {db_url.username!r} does not match receipts-db "
        f"POSTGRES_USER {receipts_env.get('POSTGRES_USER')!r}"
    )
    assert db_url.password == receipts_env.get("POSTGRES_PASSWORD"), (
        "worker DATABASE_URL password does not match receipts-db POSTGRES_PASSWORD"
    )


def test_worker_default_model_endpoint_is_a_service(services: dict) -> None:
    base_url = urlparse(_resolve_default(_env(services["worker"])["OPENAI_BASE_URL"]))
    assert base_url.scheme in ("http", "https"), (
        f"worker OPENAI_BASE_URL default should be an http(s) URL, got {base_url.geturl()!r}"
    )
    assert base_url.hostname in services, (
        f"worker OPENAI_BASE_URL default host {base_url.hostname!r} is not a compose service "
        "(the offline fallback should point at the 'model' service)"
    )
    assert base_url.hostname in _depends_on(services["worker"]), (
        f"worker uses '{base_url.hostname}' as its default model endpoint but does not depend on it"
    )


def test_ui_published_on_8233(services: dict) -> None:
    ui = services["temporal-ui"]
    host_ports = {hp for _, hp, _, _ in _published_ports(ui)}
    assert 8233 in host_ports, (
        f"temporal-ui must be published on host port 8233, got host ports {sorted(host_ports)}"
    )
    ui_addr = _resolve_default(_env(ui).get("TEMPORAL_ADDRESS", ""))
    assert ui_addr.rpartition(":")[0] == "temporal", (
        f"temporal-ui TEMPORAL_ADDRESS should point at the 'temporal' service, got {ui_addr!r}"
    )


def test_temporal_server_uses_postgres(services: dict) -> None:
    env = _env(services["temporal"])
    assert env.get("DB", "").startswith("postgres12"), (
        "temporal service should use Postgres persistence (DB=postgres12), "
        f"got DB={env.get('DB')!r}"
    )
    seeds = [s.strip() for s in env.get("POSTGRES_SEEDS", "").split(",") if s.strip()]
    assert seeds == ["temporal-db"], (
        f"temporal POSTGRES_SEEDS should name the 'temporal-db' service, got {seeds!r}"
    )
    db_env = _env(services["temporal-db"])
    assert env.get("POSTGRES_USER") == db_env.get("POSTGRES_USER"), (
        "temporal POSTGRES_USER does not match temporal-db POSTGRES_USER"
    )
    assert env.get("POSTGRES_PWD") == db_env.get("POSTGRES_PASSWORD"), (
        "temporal POSTGRES_PWD does not match temporal-db POSTGRES_PASSWORD"
    )
    assert "temporal-db" in _depends_on(services["temporal"]), (
        "temporal service must depend_on temporal-db"
    )
    image = str(services["temporal"].get("image", ""))
    assert ":" in image and not image.endswith(":latest"), (
        f"temporal image should be pinned to a concrete tag, got {image!r}"
    )


def test_built_services_have_dockerfile(services: dict) -> None:
    built = _built_from_repo_root(services)
    assert {"worker", "model"} <= set(built), (
        "worker and model should be built from the repo root ('.'), "
        f"built services: {sorted(built)}"
    )
    for name, (_, dockerfile) in built.items():
        assert (REPO_ROOT / dockerfile).is_file(), (
            f"service '{name}' is built from '.', but {dockerfile} does not exist in the repo root"
        )


def test_dockerfile_copies_existing_sources_including_worker(services: dict) -> None:
    for name, (_, dockerfile) in _built_from_repo_root(services).items():
        instructions = _dockerfile_instructions(REPO_ROOT / dockerfile)
        copied: list[str] = []
        for instr, args in instructions:
            if instr in ("COPY", "ADD"):
                sources = _copy_sources(args)
                if sources is not None:
                    copied.extend(sources)
        for src in copied:
            if any(ch in src for ch in "*?["):
                continue
            assert (REPO_ROOT / src).exists(), (
                f"{dockerfile} (service '{name}') COPYs '{src}', which does not exist in the "
                "repo — docker build would fail"
            )
        normalised = {s.rstrip("/") or "." for s in copied}
        assert "worker.py" in normalised or "." in normalised or "./" in copied, (
            f"{dockerfile} (service '{name}') does not copy worker.py into the image "
            f"(COPY sources: {copied})"
        )


def test_command_files_exist(services: dict) -> None:
    for name, (_, dockerfile) in _built_from_repo_root(services).items():
        argvs = []
        if services[name].get("command") is not None:
            argvs.append(("command", _command_argv(services[name]["command"])))
        for instr, args in _dockerfile_instructions(REPO_ROOT / dockerfile):
            if instr in ("CMD", "ENTRYPOINT"):
                argvs.append((f"{dockerfile} {instr}", _command_argv(args)))
        for origin, argv in argvs:
            for needed in _local_files_in_argv(argv):
                if needed.endswith(".py"):
                    assert (REPO_ROOT / needed).is_file(), (
                        f"service '{name}' {origin} runs {needed!r}, "
                        "which does not exist in the repo"
                    )
                else:
                    assert _module_exists(REPO_ROOT, needed), (
                        f"service '{name}' {origin} runs `python -m {needed}`, but no module "
                        f"file for it exists in the repo"
                    )


def test_worker_is_scaled_out_and_drains(services: dict) -> None:
    worker = services["worker"]
    replicas = (worker.get("deploy") or {}).get("replicas", 1)
    assert int(replicas) >= 2, f"worker should run >= 2 replicas to show scale-out, got {replicas}"
    assert "container_name" not in worker, (
        "worker must not set container_name: it prevents running more than one replica"
    )
    assert not _published_ports(worker), (
        "worker must not publish host ports: replicas would collide on the same host port"
    )
    assert worker.get("stop_grace_period"), (
        "worker should set stop_grace_period so it can drain on SIGTERM"
    )


def test_no_duplicate_host_ports(services: dict) -> None:
    seen: dict[tuple[str, int, str], str] = {}
    for name, svc in services.items():
        for host_ip, host_port, _, proto in _published_ports(svc):
            # An unbound host_ip ("" / 0.0.0.0) clashes with any other binding of that port.
            for (other_ip, other_port, other_proto), other in seen.items():
                if (
                    other_port == host_port
                    and other_proto == proto
                    and (
                        host_ip in ("", "0.0.0.0")
                        or other_ip in ("", "0.0.0.0")
                        or host_ip == other_ip
                    )
                ):
                    pytest.fail(
                        f"host port {host_port}/{proto} is published by both '{other}' and '{name}'"
                    )
            seen[(host_ip, host_port, proto)] = name
