"""`run_code`: the model's Python in a fresh Docker container (`agentledger-worker --sandbox
IMAGE`).

Each call gets a container of its own: no network, a read-only root, a small tmpfs for its
files, no capabilities, a non-root user, and limits on CPU, memory, processes, time and
output (`SandboxLimits`). The container's main process is a `sleep` that outlives the code by
a little; the code runs as an exec inside it, so after it ends its outputs folder can still be
read (a tmpfs vanishes with its container), then the container is removed.

Durable and honest:
- Nothing leaves the container but what the tool returns, so the tool has no side effect and
  a retry simply runs the code again.
- An engine or image that is not there raises `SandboxUnavailable`, retried by Temporal with
  that status; the code's own failure (an exit status, the time limit, memory, the output
  limit) is a result the model reads, never a retry.
- Containers carry labels (run, step, worker, host and pid, a deadline); a worker starting up
  removes those whose worker is dead or whose deadline passed (`SandboxEngine.reap`), so a
  worker killed mid-execution leaves none behind. The step heartbeats all the while: the
  engine calls run in a thread beside the activity's heartbeat (agentledger.activities.leases).
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import os
import socket
import tarfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from agentledger.core.constants import SANDBOX_IMAGE
from agentledger.core.errors import SetupError, sandbox_unavailable
from agentledger.core.sandbox_limits import SandboxLimits
from agentledger.core.spec import JsonDict, RiskLevel
from agentledger.store.artifacts import put_artifact, run_artifact
from agentledger.tools.registry import Tool, ToolContext, ToolError

TOOL_NAME = "run_code"
LABEL = "agentledger.sandbox"
USER = "10001:10001"
WORKDIR = "/sandbox"
INPUTS, OUTPUTS = f"{WORKDIR}/inputs", f"{WORKDIR}/outputs"
# What the result carries of each stream; the rest, up to the output limit, is an artifact.
SHOWN_BYTES = 16_000
# Staged in argv: one argument may hold 128 KiB, one exec about 2 MiB.
CHUNK, CHUNKS_PER_EXEC = 96_000, 12
# The container's sleep outlives the time limit by this much, then the container stops itself.
GRACE_SECONDS = 30
FALLBACK_API_VERSION = "1.41"

log = logging.getLogger(__name__)

# Run inside the container as the sandbox user: append base64 chunks to files.
_STAGE = (
    "import base64,os,sys\n"
    f"os.makedirs('{OUTPUTS}',exist_ok=True)\n"
    "a=sys.argv[1:]\n"
    "for p,c in zip(a[::2],a[1::2]):\n"
    " os.makedirs(os.path.dirname(p),exist_ok=True)\n"
    " open(p,'ab').write(base64.b64decode(c))\n"
)
# Every process but the container's own (init, its sleep, this one): what the code left running.
_KILL_LEFTOVERS = (
    "import os\n"
    "for p in filter(str.isdigit, os.listdir('/proc')):\n"
    " try:\n"
    "  cmd=open(f'/proc/{p}/cmdline','rb').read().split(b'\\0')[0]\n"
    "  if int(p)>1 and int(p)!=os.getpid() and cmd!=b'sleep': os.kill(int(p),9)\n"
    " except OSError: pass\n"
)
# Out-of-memory kills in the container's cgroup (v2, then v1), read after the code ends.
_OOM_KILLS = (
    "import re\n"
    "for p in ('/sys/fs/cgroup/memory.events','/sys/fs/cgroup/memory/memory.oom_control'):\n"
    " try: print(re.search(r'oom_kill (\\d+)',open(p).read()).group(1)); break\n"
    " except Exception: pass\n"
    "else: print(-1)\n"
)


@dataclass
class Execution:
    """What one execution did, as the engine saw it."""

    status: str  # ok | error | timeout | out_of_memory | output_limit
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    files: dict[str, bytes]
    image_digest: str
    seconds: float
    notes: list[str] = field(default_factory=list)


class SandboxEngine:
    """The Docker engine behind `run_code`, through an injected `docker.DockerClient`.

    Every method blocks; the tool calls them in a thread so the step keeps heartbeating.
    """

    def __init__(
        self,
        client: Any,
        image: str = SANDBOX_IMAGE,
        limits: SandboxLimits | None = None,
        *,
        identity: str | None = None,
    ) -> None:
        self.client = client
        self.image = image
        self.limits = limits or SandboxLimits()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.identity = identity or f"worker-{self.host}-{self.pid}"
        self.boot = _process_start(self.pid)

    # ------------------------------------------------------------ the engine and its image

    def image_digest(self) -> str:
        """The image's content digest (its id: no registry, so no repo digest), or
        `SandboxUnavailable` when the engine or the image is not there."""
        import docker.errors

        try:
            return str(self.client.images.get(self.image).id)
        except docker.errors.ImageNotFound:
            raise sandbox_unavailable(
                f"no image {self.image!r} in the Docker engine; build it with "
                "`agentledger sandbox build`"
            ) from None
        except Exception as err:
            raise sandbox_unavailable(f"the Docker engine does not answer ({err})") from None

    def reap(self) -> list[str]:
        """Remove sandbox containers whose worker is dead or whose deadline has passed.

        A worker on this host whose pid is gone (or now another process) is dead; a container
        of any worker past its deadline outlived every limit its worker set, so nobody waits
        for it. Returns the ids removed.
        """
        removed = []
        for container in self.client.containers.list(all=True, filters={"label": LABEL}):
            labels = container.labels
            mine = labels.get("agentledger.host") == self.host
            dead = mine and not _alive(
                labels.get("agentledger.pid"), labels.get("agentledger.boot")
            )
            deadline = float(labels.get("agentledger.deadline", "0") or 0)
            if dead or time.time() > deadline:
                self.remove(container)  # another worker starting may remove it first
                removed.append(container.id)
        return removed

    # ------------------------------------------------------------ one execution

    def create(self, labels: dict[str, str]) -> Any:
        """A started container, idle until `execute` runs code in it."""
        from docker.types import LogConfig

        limits = self.limits
        lifetime = int(limits.seconds) + GRACE_SECONDS
        container = self.client.containers.create(
            self.image,
            command=["sleep", str(lifetime)],
            user=USER,
            working_dir=WORKDIR,
            environment={"HOME": WORKDIR, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
            network_mode="none",
            read_only=True,
            tmpfs={
                WORKDIR: f"size={limits.scratch_mb}m,uid=10001,gid=10001,mode=0700",
                "/tmp": "size=16m,mode=1777",
            },
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.pids,
            ipc_mode="none",
            init=True,  # reaps what the code leaves behind, so zombies hold no pids
            log_config=LogConfig(type=LogConfig.types.NONE),
            labels={
                LABEL: "1",
                "agentledger.worker": self.identity,
                "agentledger.host": self.host,
                "agentledger.pid": str(self.pid),
                "agentledger.boot": self.boot,
                "agentledger.deadline": str(int(time.time()) + lifetime),
                **labels,
            },
        )
        container.start()
        return container

    def remove(self, container: Any) -> None:
        """Remove it now; an engine that does not answer leaves it to the next reaper."""
        try:
            container.remove(force=True)
        except Exception as err:
            if "No such container" not in str(err):
                log.warning("sandbox container %s not removed: %s", container.id[:12], err)

    def execute(self, container: Any, code: str, inputs: dict[str, bytes]) -> Execution:
        """Stage the code and inputs, run the code under the limits, read its outputs."""
        started = time.monotonic()
        self._stage(container, {f"{WORKDIR}/main.py": code.encode(), **_inputs(inputs)})
        limits = self.limits
        api = self.client.api
        exec_id = api.exec_create(
            container.id,
            ["timeout", "-s", "KILL", f"{limits.seconds:g}", "python3", f"{WORKDIR}/main.py"],
            user=USER,
            workdir=WORKDIR,
        )["Id"]
        run_started = time.monotonic()
        # The engine's own clock, should the exec's stream not end with the code.
        backstop = threading.Timer(limits.seconds + 5, lambda: self._kill(container))
        backstop.start()
        stdout, stderr, over = bytearray(), bytearray(), False
        try:
            for out, err in api.exec_start(exec_id, stream=True, demux=True):
                if over:
                    continue  # drained until the killed code's stream ends
                stdout += out or b""
                stderr += err or b""
                if len(stdout) + len(stderr) > limits.output_bytes:
                    over = True
                    threading.Thread(target=self._kill_code, args=(container,)).start()
        finally:
            backstop.cancel()
        elapsed = time.monotonic() - run_started
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        oom = self._after(container)
        container.reload()
        if container.status != "running":
            return Execution(
                status="output_limit" if over else "timeout",
                exit_code=exit_code,
                stdout=bytes(stdout[: limits.output_bytes]),
                stderr=bytes(stderr[: limits.output_bytes]),
                files={},
                image_digest=str(container.attrs["Image"]),
                seconds=round(time.monotonic() - started, 3),
                notes=["the container was stopped; its outputs are lost"],
            )
        files, notes = self._outputs(container)
        if over:
            status = "output_limit"
        elif elapsed >= limits.seconds - 0.05 and exit_code in (124, 137):
            status = "timeout"
        elif oom is not None and oom.isdigit() and int(oom) > 0:
            status = "out_of_memory"
        else:
            status = "ok" if exit_code == 0 else "error"
        return Execution(
            status=status,
            exit_code=exit_code,
            stdout=bytes(stdout[: limits.output_bytes]),
            stderr=bytes(stderr[: limits.output_bytes]),
            files=files,
            image_digest=str(container.attrs["Image"]),
            seconds=round(time.monotonic() - started, 3),
            notes=notes,
        )

    def _stage(self, container: Any, files: dict[str, bytes]) -> None:
        total = sum(len(b) for b in files.values())
        if total > self.limits.input_bytes:
            raise ToolError(
                f"the code and its input files are {total} bytes; the sandbox takes "
                f"{self.limits.input_bytes} (sandbox limit input_bytes)"
            )
        args: list[str] = []
        for path, content in files.items():
            encoded = base64.b64encode(content).decode()
            for i in range(0, max(len(encoded), 1), CHUNK):
                args += [path, encoded[i : i + CHUNK]]
                if len(args) >= 2 * CHUNKS_PER_EXEC:
                    self._exec(container, ["python3", "-c", _STAGE, *args])
                    args = []
        if args:
            self._exec(container, ["python3", "-c", _STAGE, *args])

    def _exec(self, container: Any, cmd: list[str]) -> str:
        result = container.exec_run(cmd, user=USER, workdir=WORKDIR, demux=True)
        out, err = result.output
        if result.exit_code != 0:
            raise ToolError(
                f"the sandbox could not prepare the code ({cmd[0]} exited {result.exit_code}): "
                f"{(err or b'').decode(errors='replace')[-500:]}"
            )
        return (out or b"").decode(errors="replace")

    def _outputs(self, container: Any) -> tuple[dict[str, bytes], list[str]]:
        """The regular files under the outputs folder, by path relative to it."""
        api = self.client.api
        exec_id = api.exec_create(container.id, ["tar", "-C", OUTPUTS, "-cf", "-", "."], user=USER)[
            "Id"
        ]
        data = bytearray()
        for out, _ in api.exec_start(exec_id, stream=True, demux=True):
            data += out or b""
        if api.exec_inspect(exec_id).get("ExitCode") != 0:
            return {}, ["the outputs folder could not be read (processes left over?)"]
        files = {}
        with tarfile.open(fileobj=io.BytesIO(bytes(data))) as archive:
            for member in archive.getmembers():
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is not None:
                    files[member.name.removeprefix("./")] = handle.read()
        return files, []

    def _after(self, container: Any) -> str | None:
        """Kill what the code left running, then read the out-of-memory count; None (and
        the container killed) where no process can start in it."""
        try:
            result = container.exec_run(["python3", "-c", _KILL_LEFTOVERS + _OOM_KILLS], user=USER)
        except Exception:
            result = None
        if result is None or result.exit_code != 0:
            self._kill(container)
            return None
        return str(result.output.decode(errors="replace").strip())

    def _kill_code(self, container: Any) -> None:
        """Kill the code's processes (all but the container's own), else the container."""
        try:
            result = container.exec_run(["python3", "-c", _KILL_LEFTOVERS], user=USER)
        except Exception:
            result = None
        if result is None or result.exit_code != 0:
            self._kill(container)

    def _kill(self, container: Any) -> None:
        try:
            container.kill()
        except Exception:
            pass  # already stopped


def _inputs(inputs: dict[str, bytes]) -> dict[str, bytes]:
    staged = {}
    for name, content in inputs.items():
        base = os.path.basename(name) or "input"
        staged[f"{INPUTS}/{base}"] = content
    return staged


def _process_start(pid: int) -> str:
    """When a process started (clock ticks since boot): with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: str | None, boot: str | None) -> bool:
    if not pid or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not boot or _process_start(int(pid)) == boot


# ---------------------------------------------------------------- the tool


class RunCodeArgs(BaseModel):
    code: str = Field(
        min_length=1,
        max_length=200_000,
        description="a Python 3 program, run as /sandbox/main.py with /sandbox as the working "
        "directory; print the answer; files written to /sandbox/outputs/ are returned",
    )
    files: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="artifact ids (sha256:...) of this run's earlier outputs, staged as "
        "/sandbox/inputs/NAME",
    )


def run_code_tool(engine: SandboxEngine) -> Tool:
    """The `run_code` tool over `engine`."""
    limits = engine.limits

    async def run_code(args: RunCodeArgs, ctx: ToolContext) -> JsonDict:
        inputs = {}
        for artifact_id in args.files:
            found = await run_artifact(ctx.conn, ctx.run_id, artifact_id)
            if found is None:
                raise ToolError(f"no artifact {artifact_id} in this run")
            inputs[found[0]] = found[1]
        labels = {"agentledger.run_id": ctx.run_id, "agentledger.step_id": ctx.step_id}
        try:
            container = await asyncio.to_thread(engine.create, labels)
        except Exception as err:
            raise _unavailable(engine, err) from None
        ctx.heartbeat({"container": container.id[:12]})
        try:
            execution = await asyncio.to_thread(engine.execute, container, args.code, inputs)
        except ToolError:
            raise
        except Exception as err:
            raise _unavailable(engine, err) from None
        finally:
            # Also when the step is cancelled or times out: the thread's container goes now.
            await asyncio.shield(asyncio.to_thread(engine.remove, container))
        return await _result(ctx, engine, execution)

    return Tool(
        name=TOOL_NAME,
        description=(
            "Run a Python 3 program in an isolated sandbox and get its stdout, stderr, exit "
            "code and the files it writes to /sandbox/outputs/. No network; the standard "
            f"library and the image's packages only; at most {limits.seconds:g} s, "
            f"{limits.memory_mb} MB of memory and {limits.output_bytes} bytes of output. "
            "Use it to compute, parse or check data rather than guessing."
        ),
        args_model=RunCodeArgs,
        fn=run_code,
        side_effect=False,
        risk=RiskLevel.LOW,
        local=False,  # a program may run for seconds: an activity of its own, heartbeating
    )


def _unavailable(engine: SandboxEngine, err: Exception) -> Exception:
    from docker.errors import ImageNotFound

    if isinstance(err, ImageNotFound):
        return sandbox_unavailable(
            f"no image {engine.image!r} in the Docker engine; build it with "
            "`agentledger sandbox build`"
        )
    return sandbox_unavailable(f"the Docker engine does not answer ({type(err).__name__}: {err})")


_EXPLAINED = {
    "ok": "the code ran and exited 0",
    "error": "the code exited with an error: read stderr",
    "timeout": "the code was killed at the time limit ({seconds:g} s)",
    "out_of_memory": "the code was killed for using more than {memory_mb} MB of memory",
    "output_limit": "the code was killed for printing more than {output_bytes} bytes",
}


async def _result(ctx: ToolContext, engine: SandboxEngine, run: Execution) -> JsonDict:
    """The model's view: short streams inline, the rest and every output file as artifacts."""
    limits = engine.limits
    result: JsonDict = {
        "status": run.status,
        "exit_code": run.exit_code,
        "explanation": _EXPLAINED[run.status].format(**limits.__dict__),
    }
    for name, data in (("stdout", run.stdout), ("stderr", run.stderr)):
        result[name] = data[:SHOWN_BYTES].decode(errors="replace")
        if len(data) > SHOWN_BYTES:
            ref = await put_artifact(
                ctx.conn,
                run_id=ctx.run_id,
                step_id=ctx.step_id,
                name=f"{name}.txt",
                media_type="text/plain",
                content=data,
            )
            result[f"{name}_artifact"] = ref.artifact_id
            result[f"{name}_bytes"] = len(data)
    files = []
    for path, content in sorted(run.files.items()):
        ref = await put_artifact(
            ctx.conn,
            run_id=ctx.run_id,
            step_id=ctx.step_id,
            name=path,
            media_type=_media_type(path),
            content=content,
        )
        files.append({"name": path, "artifact_id": ref.artifact_id, "size_bytes": ref.size_bytes})
    result["files"] = files
    if run.notes:
        result["notes"] = run.notes
    result.update(image=engine.image, image_digest=run.image_digest, seconds=run.seconds)
    return result


def _media_type(path: str) -> str:
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    return {
        "txt": "text/plain",
        "csv": "text/csv",
        "json": "application/json",
        "png": "image/png",
        "svg": "image/svg+xml",
        "html": "text/html",
    }.get(ext, "application/octet-stream")


# ---------------------------------------------------------------- the worker's flag


def sandbox_tools(
    image: str,
    limits: SandboxLimits | None = None,
    *,
    identity: str | None = None,
    client: Any = None,
) -> list[Tool]:
    """`agentledger-worker --sandbox IMAGE`: the engine checked, orphans reaped, the tool.

    The engine comes from DOCKER_HOST (the docker SDK's `from_env`) unless `client` is given.
    An engine that does not answer now is a warning: calls retry until it does. An engine that
    answers without the image is a setup error, said before the worker polls.
    """
    import docker

    if client is None:
        try:
            client = docker.from_env()  # the API version the engine speaks
        except docker.errors.DockerException:
            # The engine is down: a client that need not ask it, at an API version old enough
            # for any engine still in use (Debian 12's docker.io 20.10 speaks 1.41).
            client = docker.from_env(version=FALLBACK_API_VERSION)
    engine = SandboxEngine(client, image, limits, identity=identity)
    try:
        client.ping()
    except Exception as err:
        log.warning("the Docker engine does not answer (%s); run_code will retry", err)
        return [run_code_tool(engine)]
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise SetupError(
            f"--sandbox {image}: no such image in the Docker engine; build it with "
            f"`agentledger sandbox build --name {image}`"
        ) from None
    reaped = engine.reap()
    if reaped:
        log.info("removed %d sandbox container(s) left by dead workers", len(reaped))
    return [run_code_tool(engine)]
