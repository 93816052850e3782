"""`agentledger sandbox build`: the sandbox image, from Debian's packages, with no registry.

`debootstrap --variant=minbase --include=python3,python3-venv,PACKAGES` makes a root file
system, `docker import` turns it into a base image, and a one-line `docker build` on it adds the
sandbox user and labels. An image whose recipe (suite, mirror, packages, this module's
version) is already built is reused: the recipe's hash is a label on it. The image is known by
its id, the digest of its content, which every execution records (and a run's receipt lists).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentledger.core.constants import SANDBOX_IMAGE as DEFAULT_IMAGE
from agentledger.core.errors import SetupError
from agentledger.tools.sandbox import USER, WORKDIR

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
RECIPE_VERSION = 2
# Beside your packages: Python, and its venv module, so the project's own image (the Dockerfile's
# BASE_IMAGE) can build on the same base and one debootstrap serves both.
BASE_PACKAGES = ("python3", "python3-venv")
KEY_LABEL = "agentledger.sandbox.key"
# What a minimal sandbox does not need: documentation, translations, package caches.
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/locale", "var/cache/apt", "var/lib/apt/lists")


def dockerfile(base: str, key: str, packages: tuple[str, ...]) -> str:
    uid, gid = USER.split(":")
    return (
        f"FROM {base}\n"
        f"RUN echo 'sandbox:x:{uid}:{gid}::{WORKDIR}:/usr/sbin/nologin' >> /etc/passwd"
        f" && echo 'sandbox:x:{gid}:' >> /etc/group && mkdir -p {WORKDIR}\n"
        f"LABEL {KEY_LABEL}={key} agentledger.sandbox.packages={','.join(packages) or '-'}\n"
        f'USER {USER}\nWORKDIR {WORKDIR}\nCMD ["python3"]\n'
    )


@dataclass(frozen=True)
class Recipe:
    packages: tuple[str, ...] = ()
    suite: str = SUITE
    mirror: str = MIRROR

    @property
    def key(self) -> str:
        body = json.dumps([RECIPE_VERSION, self.suite, self.mirror, sorted(self.packages)])
        return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BuiltImage:
    name: str
    digest: str
    key: str
    reused: bool
    seconds: float


def find(client: Any, key: str) -> Any | None:
    images = client.images.list(filters={"label": f"{KEY_LABEL}={key}"})
    return images[0] if images else None


def build(
    client: Any,
    recipe: Recipe,
    name: str = DEFAULT_IMAGE,
    *,
    rebuild: bool = False,
    log: Any = print,
) -> BuiltImage:
    """The sandbox image for `recipe`, tagged `name`: reused when built before."""
    started = time.monotonic()
    key = recipe.key
    image = None if rebuild else find(client, key)
    reused = image is not None
    if image is None:
        base = f"agentledger-sandbox-base:{key}"
        if rebuild or not client.images.list(name=base):
            import_base(client, recipe, base, log)
        log(f"building {name} on {base}")
        image, _ = client.images.build(
            fileobj=io.BytesIO(dockerfile(base, key, recipe.packages).encode()),
            tag=name,
            rm=True,
            network_mode="none",
        )
    repository, _, tag = name.rpartition(":") if ":" in name else (name, "", "latest")
    image.tag(repository, tag or "latest")
    return BuiltImage(name, str(image.id), key, reused, round(time.monotonic() - started, 1))


def import_base(client: Any, recipe: Recipe, base: str, log: Any) -> None:
    """debootstrap a root file system from Debian's packages and import it as `base`."""
    if shutil.which("debootstrap") is None:
        raise SetupError("debootstrap is not installed: apt-get install debootstrap")
    include = ",".join(dict.fromkeys([*BASE_PACKAGES, *recipe.packages]))
    with tempfile.TemporaryDirectory(prefix="agentledger-sandbox-") as tmp:
        rootfs, archive = Path(tmp, "rootfs"), Path(tmp, "rootfs.tar")
        log(f"debootstrap {recipe.suite} with {include} (about a minute)")
        done = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={include}",
                recipe.suite,
                str(rootfs),
                recipe.mirror,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SetupError(f"debootstrap failed: {(done.stdout + done.stderr)[-2000:]}")
        for part in TRIM:
            shutil.rmtree(rootfs / part, ignore_errors=True)
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], check=True)
        repository, _, tag = base.rpartition(":")
        log(f"importing {base}")
        client.api.import_image_from_file(str(archive), repository=repository, tag=tag)
