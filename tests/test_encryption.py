"""Payload encryption: with keys set, Temporal's history holds only ciphertext (failures
included), clients with the keys read it as before, keys rotate, and the codec server lets the
Web UI decode over HTTP."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from email.message import Message

import pytest
from google.protobuf import json_format
from pydantic import SecretBytes
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from agentledger.cli.render import run_report
from agentledger.client.task_failures import KEYS_FIX
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import NotAnswered, SetupError, UnknownEncryptionKey
from agentledger.core.messages import RunMessages
from agentledger.core.results import RunResult
from agentledger.core.wire import SayInput
from agentledger.dev.stack import free_port, port_open
from agentledger.temporal.codec_server import CodecServer
from agentledger.temporal.encryption import (
    ENCODING,
    KEY_ID_METADATA,
    EncryptionCodec,
    data_converter,
)
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.conftest import running_worker
from tests.support import eventually, make_spec

KEY_A = os.urandom(32)
KEY_B = os.urandom(32)


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def encrypted(
    settings: AgentLedgerConfig, key_id: str = "a", key: bytes = KEY_A
) -> AgentLedgerConfig:
    return settings.model_copy(
        update=dict(encryption_keys={key_id: SecretBytes(key)}, encryption_key_id=key_id)
    )


async def test_history_holds_only_ciphertext(settings, pool):
    secret_settings = encrypted(settings)
    target = settings.temporal_address
    secret_client = await Client.connect(target, data_converter=data_converter(secret_settings))
    marker = f"zebra-{uuid.uuid4().hex[:8]}"
    spec = make_spec(f"Summarize our invoice policy. {marker}", allowed_tools=["search_notes"])

    async with running_worker(secret_client, secret_settings, pool):
        started = await ops.start_run(secret_client, spec, task_queue=settings.task_queue)
        handle = secret_client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        result: RunResult = await handle.result()
    assert result.status.value == "completed"

    # A client without the keys sees what the server stores: ciphertext, tagged with the key id.
    plain_client = await Client.connect(target)
    history = await plain_client.get_workflow_handle(started.run_id).fetch_history()
    raw = b"".join(event.SerializeToString() for event in history.events)
    assert marker.encode() not in raw
    assert marker not in history.to_json()

    payloads: list[Payload] = []
    activities = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads += event.workflow_execution_started_event_attributes.input.payloads
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities += 1
            payloads += event.activity_task_scheduled_event_attributes.input.payloads
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            payloads += event.activity_task_completed_event_attributes.result.payloads
    assert activities > 0 and payloads
    assert all(p.metadata["encoding"] == ENCODING for p in payloads)
    assert all(p.metadata[KEY_ID_METADATA] == b"a" for p in payloads)
    with pytest.raises(Exception, match="binary/encrypted"):
        await plain_client.get_workflow_handle(started.run_id).result()

    # The client with the keys reads the same history in the clear.
    started_event = history.events[0].workflow_execution_started_event_attributes
    decoded = await secret_client.data_converter.decode(started_event.input.payloads)
    assert marker in json.dumps(decoded, default=str)
    again = secret_client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
    assert (await again.result()).answer == result.answer


async def test_failure_messages_and_traces_are_encrypted(settings):
    converter = data_converter(encrypted(settings))
    marker = f"customer-{uuid.uuid4().hex[:8]}"
    try:
        raise ApplicationError(f"tool failed for {marker}", {"who": marker})
    except ApplicationError as err:
        error = err
    failure = Failure()
    await converter.encode_failure(error, failure)

    assert failure.message == "Encoded failure"
    assert failure.stack_trace == ""
    assert marker.encode() not in failure.SerializeToString()
    assert failure.encoded_attributes.metadata["encoding"] == ENCODING

    back = await converter.decode_failure(failure)
    assert isinstance(back, ApplicationError) and marker in back.message


async def test_keys_rotate_and_an_unknown_key_is_named():
    original = Payload(metadata={"encoding": b"json/plain"}, data=b'{"task": "refund ana"}')
    [under_a] = await EncryptionCodec({"a": KEY_A}, "a").encode([original])
    assert b"refund ana" not in under_a.data

    rotated = EncryptionCodec({"a": KEY_A, "b": KEY_B}, "b")
    assert await rotated.decode([under_a]) == [original]
    [under_b] = await rotated.encode([original])
    assert under_b.metadata[KEY_ID_METADATA] == b"b"
    assert await rotated.decode([under_b]) == [original]
    # Payloads written before encryption was on pass through.
    assert await rotated.decode([original]) == [original]

    with pytest.raises(UnknownEncryptionKey, match="'b'"):
        await EncryptionCodec({"a": KEY_A}, "a").decode([under_b])
    with pytest.raises(UnknownEncryptionKey, match="'a'"):
        await EncryptionCodec({"a": KEY_B}, "a").decode([under_a])


def test_keys_come_from_settings_and_bad_ones_are_refused():
    env = {"AGENTLEDGER_ENCRYPTION_KEYS": f"a:{b64(KEY_A)}, b:{b64(KEY_B)}"}
    loaded = AgentLedgerConfig.load(env)
    assert loaded.encryption_key_material() == {"a": KEY_A, "b": KEY_B}
    assert loaded.encryption_key_id == "a"
    assert b64(KEY_A) not in repr(loaded) and "KEY_A" not in repr(loaded)
    assert str(KEY_A) not in repr(loaded)
    assert (
        AgentLedgerConfig.load({**env, "AGENTLEDGER_ENCRYPTION_KEY_ID": "b"}).encryption_key_id
        == "b"
    )
    assert AgentLedgerConfig.load({}).encryption_keys == {}

    bad = {
        "nokey": "not a pair",
        "not valid base64": "a:%%%",
        "is 16 bytes": f"a:{b64(os.urandom(16))}",
        "appears twice": f"a:{b64(KEY_A)},a:{b64(KEY_B)}",
    }
    for message, value in bad.items():
        with pytest.raises(SetupError) as caught:
            AgentLedgerConfig.load({"AGENTLEDGER_ENCRYPTION_KEYS": value})
        assert ("id:base64key" if message == "nokey" else message) in str(caught.value)
    with pytest.raises(SetupError, match="'c' is not among"):
        AgentLedgerConfig.load({**env, "AGENTLEDGER_ENCRYPTION_KEY_ID": "c"})


def post(url: str, body: bytes, method: str = "POST") -> tuple[int, Message, bytes]:
    request = urllib.request.Request(
        url,
        data=body if method == "POST" else None,
        method=method,
        headers={"content-type": "application/json", "x-namespace": "default"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()


def test_codec_server_encodes_and_decodes_for_the_web_ui():
    original = Payloads(
        payloads=[Payload(metadata={"encoding": b"json/plain"}, data=b'"notify ana"')]
    )
    body = json_format.MessageToJson(original).encode()
    codec = EncryptionCodec({"a": KEY_A}, "a")
    with CodecServer(codec, port=0, web_ui_origin="http://ui.example:8233") as server:
        status, headers, encoded = post(f"{server.url}/encode", body)
        assert status == 200
        assert headers["access-control-allow-origin"] == "http://ui.example:8233"
        wire = json.loads(encoded)
        assert b"notify ana" not in base64.b64decode(wire["payloads"][0]["data"])
        assert base64.b64decode(wire["payloads"][0]["metadata"]["encoding"]) == ENCODING

        status, _, decoded = post(f"{server.url}/decode", encoded)
        assert status == 200
        assert json_format.Parse(decoded, Payloads()) == original

        status, headers, _ = post(f"{server.url}/decode", b"", method="OPTIONS")
        assert status in (200, 204)
        assert headers["access-control-allow-origin"] == "http://ui.example:8233"
        allowed = headers["access-control-allow-headers"]
        assert {"content-type", "x-namespace", "authorization"} <= {
            h.strip() for h in allowed.split(",")
        }
        assert "POST" in headers["access-control-allow-methods"]

        # A payload under a key the server lacks is refused with the key id, not garbled.
        foreign = EncryptionCodec({"z": KEY_B}, "z").encrypt(original.payloads[0])
        status, _, error = post(
            f"{server.url}/decode",
            json_format.MessageToJson(Payloads(payloads=[foreign])).encode(),
        )
        assert status == 400 and "'z'" in json.loads(error)["error"]


async def test_encryption_switched_on_through_the_environment(settings, pool, tmp_path):
    """AGENTLEDGER_ENCRYPTION_KEYS in the environment of the worker, the CLI and the codec server
    (`pool`: a migrated database, as a deployment has before its first command):
    the run completes, the server's history holds ciphertext, the codec server decodes it."""
    port = free_port()
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "TEMPORAL_"))},
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url,
        "OPENAI_BASE_URL": settings.openai_base_url,
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_HOME": str(tmp_path / "home"),
        "AGENTLEDGER_ENCRYPTION_KEYS": f"k1:{b64(KEY_A)}",
    }
    log = (tmp_path / "processes.log").open("w")
    worker = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentledger.worker.main", "--demo"),
        env=environ,
        stdout=log,
        stderr=log,
    )
    codec = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentledger.temporal.codec_server", "--port", str(port)),
        env=environ,
        stdout=log,
        stderr=log,
    )
    marker = f"okapi-{uuid.uuid4().hex[:8]}"
    try:
        start = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "agentledger", "start", "--json", "--wait", "30", "--task"),
            f"Summarize our invoice policy. {marker}",
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(start.communicate(), 120)
        assert start.returncode == 0, err.decode()
        run_id = json.loads(out)["run_id"]
        keyed = await Client.connect(
            settings.temporal_address,
            data_converter=data_converter(AgentLedgerConfig.load(environ)),
        )
        handle = keyed.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
        result = await asyncio.wait_for(handle.result(), 120)
        assert result.status.value == "completed"

        plain = await Client.connect(settings.temporal_address)
        history = await plain.get_workflow_handle(run_id).fetch_history()
        raw = b"".join(event.SerializeToString() for event in history.events)
        assert marker.encode() not in raw
        started_input = history.events[0].workflow_execution_started_event_attributes.input
        assert all(p.metadata["encoding"] == ENCODING for p in started_input.payloads)
        assert all(p.metadata[KEY_ID_METADATA] == b"k1" for p in started_input.payloads)

        # The Web UI's call: the codec server, keyed by the same variable, decodes the input.
        body = json_format.MessageToJson(Payloads(payloads=list(started_input.payloads)))
        for _ in range(100):
            if port_open(port):
                break
            await asyncio.sleep(0.1)
        status, _, decoded = await asyncio.to_thread(
            post, f"http://127.0.0.1:{port}/decode", body.encode()
        )
        assert status == 200
        plain_payloads = json_format.Parse(decoded, Payloads()).payloads
        assert plain_payloads[0].metadata["encoding"] == b"json/plain"
        assert marker in plain_payloads[0].data.decode()
    finally:
        for process in (worker, codec):
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()
        log.close()


@pytest.mark.parametrize("worker_keys", ["none", "other"])
async def test_a_worker_without_the_keys_makes_status_say_so_with_the_fix(
    settings, pool, tmp_path, worker_keys
):
    """A client with AGENTLEDGER_ENCRYPTION_KEYS starts a run; the only worker (a real process)
    has no keys, or other keys, so it fails the run's workflow task for ever. `status` and
    `status --json` say so and name the fix, instead of "no worker answered"."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "TEMPORAL_"))},
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url,
        "OPENAI_BASE_URL": settings.openai_base_url,
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_HOME": str(tmp_path / "home"),
    }
    worker_environ = dict(environ)
    if worker_keys == "other":
        worker_environ["AGENTLEDGER_ENCRYPTION_KEYS"] = f"k9:{b64(KEY_B)}"
    worker = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentledger.worker.main", "--demo"),
        env=worker_environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    keyed_environ = {**environ, "AGENTLEDGER_ENCRYPTION_KEYS": f"k1:{b64(KEY_A)}"}
    try:
        keyed = await Client.connect(
            settings.temporal_address,
            data_converter=data_converter(AgentLedgerConfig.load(keyed_environ)),
        )
        started = await ops.start_run(keyed, make_spec(), task_queue=settings.task_queue)
        handle = keyed.get_workflow_handle(started.run_id)
        await eventually(lambda: _task_retried(handle), seconds=60, what="a failed workflow task")

        with pytest.raises(NotAnswered) as refused:
            await ops.inspect(keyed, started.run_id, mirror=pool, wait=5)
        said = str(refused.value)
        assert "fails this run's workflow task" in said and KEYS_FIX in said, said
        assert "k9" in said if worker_keys == "other" else "without" in said, said

        cli = await asyncio.create_subprocess_exec(
            *(
                sys.executable,
                "-m",
                "agentledger",
                "status",
                started.run_id,
                "--json",
                "--wait",
                "5",
            ),
            env=keyed_environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(cli.communicate(), 60)
        assert cli.returncode != 0 and not out
        error = json.loads(err)["error"]
        assert KEYS_FIX in error["message"], error
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(worker.wait(), 20)
        except TimeoutError:
            worker.kill()
            await worker.wait()


async def test_a_run_that_ran_shows_the_mismatch_beside_its_mirrored_state(
    settings, pool, tmp_path
):
    """A session answered by a worker with the keys; that worker gone, one without them
    takes the next message and fails on it: `status` shows the run from the mirror, and the
    failure with its fix (`workflow_task_failure`, a `stuck:` line)."""
    secret = encrypted(settings)
    keyed = await Client.connect(settings.temporal_address, data_converter=data_converter(secret))
    spec = make_spec("Tell me about refunds.", allowed_tools=[], session={"idle_timeout": 600})
    async with running_worker(keyed, secret, pool):
        started = await ops.start_run(keyed, spec, task_queue=settings.task_queue)

        async def idle() -> bool:
            state = await ops.status(keyed, started.run_id)
            return state.status.value == "waiting_for_message"

        await eventually(idle, seconds=60, what="the first answer")
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "TEMPORAL_"))},
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url,
        "OPENAI_BASE_URL": settings.openai_base_url,
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_HOME": str(tmp_path / "home"),
    }
    worker = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "agentledger.worker.main", "--demo"),
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        handle = keyed.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        await handle.signal(
            RunMessages.SAY.kept_signal, SayInput(message_id="m1", text="And exchanges?", by="a")
        )
        await eventually(
            lambda: _task_retried(keyed.get_workflow_handle(started.run_id)),
            seconds=60,
            what="a failed workflow task",
        )
        report = await ops.inspect(keyed, started.run_id, mirror=pool, wait=5)
        assert report.source == "mirror"
        assert report.workflow_task_failure and KEYS_FIX in report.workflow_task_failure
        assert "stuck: " in run_report(report) and "without" in run_report(report)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(worker.wait(), 20)
        except TimeoutError:
            worker.kill()
            await worker.wait()


async def _task_retried(handle) -> bool:
    described = await handle.describe()
    return described.raw_description.pending_workflow_task.attempt >= 2
