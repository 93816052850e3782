"""A real Docker engine for the sandbox tests, and the sandbox image built on it once.

The engine is the one DOCKER_HOST names if it answers (CI starts one, .ci/run), else one this
session starts at a known socket with a data root of its own (`dockerd --bridge=none
--iptables=false`, as the machine's rules ask) and stops by its pid at the end. Images live in
that data root, so the sandbox image, found by its recipe's hash, is built once and reused by
every later session. Where no engine can start, the tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

SOCKET = "/run/agentledger-test-docker.sock"
DATA_ROOT = "/var/lib/agentledger-test-docker"
EXEC_ROOT = "/run/agentledger-test-docker"
IMAGE = "agentledger-sandbox:test"


@dataclass
class Engine:
    client: Any
    base_url: str
    image: str
    digest: str


def _answers(base_url: str) -> Any | None:
    import docker

    try:
        client = docker.DockerClient(base_url=base_url, timeout=120)
        client.ping()
        return client
    except Exception:
        return None


def _start_dockerd() -> tuple[subprocess.Popen[bytes] | None, str]:
    """A dockerd of this session's own; (None, why) where none can start."""
    if shutil.which("dockerd") is None:
        return None, "no dockerd here (apt-get install docker.io)"
    if os.geteuid() != 0:
        return None, "dockerd needs root, and the tests do not run as root"
    os.makedirs(DATA_ROOT, exist_ok=True)
    log = open(f"{DATA_ROOT}.log", "ab")  # the daemon's log, open while it runs
    daemon = subprocess.Popen(
        [
            "dockerd",
            "--bridge=none",
            "--iptables=false",
            "-H",
            f"unix://{SOCKET}",
            "--data-root",
            DATA_ROOT,
            "--exec-root",
            EXEC_ROOT,
            "--pidfile",
            f"{EXEC_ROOT}.pid",
        ],
        stdout=log,
        stderr=log,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            return None, f"dockerd exited {daemon.returncode} (see {DATA_ROOT}.log)"
        if _answers(f"unix://{SOCKET}"):
            return daemon, ""
        time.sleep(0.5)
    daemon.kill()
    return None, f"dockerd did not answer within 60 s (see {DATA_ROOT}.log)"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Engine]:
    pytest.importorskip("docker", reason="the docker SDK is not installed (pip install docker)")
    from agentledger.tools import sandbox_image

    daemon = None
    base_url = os.environ.get("DOCKER_HOST") or f"unix://{SOCKET}"
    client = _answers(base_url)
    if client is None:
        daemon, why = _start_dockerd()
        if daemon is None:
            pytest.skip(f"no Docker engine can start here: {why}")
        base_url = f"unix://{SOCKET}"
        client = _answers(base_url)
    try:
        if shutil.which("debootstrap") is None and not sandbox_image.find(
            client, sandbox_image.Recipe().key
        ):
            pytest.skip("no sandbox image and no debootstrap to build one (apt-get install it)")
        built = sandbox_image.build(client, sandbox_image.Recipe(), IMAGE, log=lambda _: None)
        yield Engine(client, base_url, IMAGE, built.digest)
    finally:
        if daemon is not None:
            daemon.terminate()  # this session's own engine, by its process
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()


# ---------------------------------------------------------------- the project's own image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE_INPUTS = ("Dockerfile", "pyproject.toml", "README.md", "worker.py", "starter.py")
IMAGE_TREES = ("agentledger", "workflows", "activities")


def project_image_key() -> str:
    """A hash of everything the Dockerfile copies: the image is rebuilt when one changes."""
    import hashlib
    from pathlib import Path

    digest = hashlib.sha256()
    paths = [Path(ROOT, name) for name in IMAGE_INPUTS]
    for tree in IMAGE_TREES:
        paths += sorted(p for p in Path(ROOT, tree).rglob("*.py") if "__pycache__" not in p.parts)
    for path in paths:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build_project_image(engine: Engine) -> str:
    """The Dockerfile built on a base from Debian's packages, offline: its dependencies are
    wheels this machine's pip gathers into wheelhouse/. Reused while its inputs hash alike."""
    from agentledger.tools import sandbox_image

    client = engine.client
    name = f"agentledger:test-{project_image_key()}"
    if client.images.list(name=name):
        return name
    recipe = sandbox_image.Recipe()  # the sandbox's own base: one debootstrap for both
    base = f"agentledger-sandbox-base:{recipe.key}"
    if not client.images.list(name=base):
        sandbox_image.import_base(client, recipe, base, log=lambda _: None)
    wheels = os.path.join(ROOT, "wheelhouse")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "-w", wheels),
            *("-c", os.path.join(ROOT, "constraints.txt"), f"{ROOT}[otel]", "setuptools>=70.1"),
        ],
        check=True,
    )
    client.images.build(
        path=ROOT,
        tag=name,
        rm=True,
        network_mode="none",
        buildargs={
            "BASE_IMAGE": base,
            "PIP_INSTALL_ARGS": "--no-index --find-links /app/wheels",
        },
    )
    return name
