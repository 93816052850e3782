"""`agentledger sandbox build|show`: the image `run_code` runs the model's code in.

Built from Debian's packages on this machine (no registry), reused while its recipe is
unchanged; serve it with `agentledger-worker --sandbox NAME`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from agentledger.cli.cli_options import add_output_flags
from agentledger.core.constants import SANDBOX_IMAGE as DEFAULT_IMAGE


def add_commands(sub: Any) -> None:
    """Add the `sandbox` command group to the top-level subparsers."""
    group = sub.add_parser("sandbox", help="the image run_code runs code in (Docker)")
    commands = group.add_subparsers(dest="sandbox_command", required=True)
    p = commands.add_parser(
        "build", help="build it from Debian's packages (debootstrap, no registry)"
    )
    p.add_argument(
        "--packages",
        default="",
        metavar="PKG,PKG",
        help="Debian packages beside python3, e.g. python3-numpy,python3-pandas",
    )
    p.add_argument(
        "--name", default=DEFAULT_IMAGE, help=f"the image's tag (default {DEFAULT_IMAGE})"
    )
    p.add_argument("--rebuild", action="store_true", help="build even if this recipe was built")
    add_output_flags(p)


def dispatch(args: argparse.Namespace) -> int:
    """Build (or reuse) the image; it needs a Docker engine, not the stack."""
    import docker

    from agentledger.core.errors import SetupError
    from agentledger.tools import sandbox_image

    try:
        client = docker.from_env()
    except docker.errors.DockerException as err:
        raise SetupError(f"no Docker engine answers (DOCKER_HOST): {err}") from None
    packages = tuple(p.strip() for p in args.packages.split(",") if p.strip())
    quiet = args.json
    built = sandbox_image.build(
        client,
        sandbox_image.Recipe(packages=packages),
        args.name,
        rebuild=args.rebuild,
        log=(lambda _: None) if quiet else (lambda line: print(line, flush=True)),
    )
    if args.json:
        print(json.dumps(built.__dict__))
    else:
        how = "reused" if built.reused else f"built in {built.seconds:.0f} s"
        print(
            f"{built.name} {built.digest} ({how}); serve it: "
            f"agentledger-worker --sandbox {built.name}"
        )
    return 0
