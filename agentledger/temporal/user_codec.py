"""A payload codec of the user's own, for the commands that read what their app sealed.

A Temporal app that adds agentledger with `AgentLedgerPlugin` keeps its own `PayloadCodec`, so
every payload of its runs is sealed by it. The command line and the stock worker read those
payloads with the same codec, named by AGENTLEDGER_CODEC (`PKG.MODULE:ATTR`: a codec, or a
class or function that makes one), or through the app's codec server, AGENTLEDGER_CODEC_ENDPOINT
(Temporal's remote codec protocol, as the `temporal` CLI's `--codec-endpoint` takes it).
Without either, a sealed payload is named in one line with the fix
(`agentledger.core.errors.sealed_payload`).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import ServiceUnreachable, SetupError


def user_codec(settings: AgentLedgerConfig) -> PayloadCodec | None:
    """The codec the settings name (AGENTLEDGER_CODEC first), or None."""
    if settings.codec:
        return load_codec(settings.codec)
    if settings.codec_endpoint:
        return RemoteCodec(settings.codec_endpoint, settings.temporal_namespace)
    return None


def load_codec(reference: str) -> PayloadCodec:
    """`PKG.MODULE:ATTR` (ATTR may be dotted: `Codec.from_environment`) as a codec."""
    module_name, _, attribute = reference.partition(":")
    where = f"AGENTLEDGER_CODEC={reference}"
    if not module_name or not attribute:
        raise SetupError(f"{where}: expected PKG.MODULE:ATTR")
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as err:
        raise SetupError(
            f"{where}: {module_name} does not import ({err}); is it on PYTHONPATH?"
        ) from err
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise SetupError(f"{where}: {module_name} has no {attribute}") from None
    if not isinstance(found, PayloadCodec) and callable(found):
        found = found()
    if not isinstance(found, PayloadCodec):
        raise SetupError(f"{where} is not a temporalio PayloadCodec, nor makes one")
    return found


class RemoteCodec(PayloadCodec):
    """A codec server's /encode and /decode (Temporal's remote codec protocol): the payloads
    go there as protobuf JSON and come back in the same shape."""

    def __init__(self, endpoint: str, namespace: str) -> None:
        self._endpoint = endpoint.rstrip("/")
        self._namespace = namespace

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._call("encode", payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._call("decode", payloads)

    async def _call(self, action: str, payloads: Sequence[Payload]) -> list[Payload]:
        import httpx  # only a process given an endpoint loads it (with what it brings)

        if not payloads:
            return []
        url = f"{self._endpoint}/{action}"
        body = json_format.MessageToJson(Payloads(payloads=payloads))
        headers = {"content-type": "application/json", "x-namespace": self._namespace}
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                response = await http.post(url, content=body, headers=headers)
        except httpx.HTTPError as err:
            raise ServiceUnreachable(
                f"the codec server at {url} (AGENTLEDGER_CODEC_ENDPOINT) did not answer: {err}"
            ) from err
        if response.status_code != 200:
            raise SetupError(
                f"the codec server at {url} (AGENTLEDGER_CODEC_ENDPOINT) answered "
                f"{response.status_code}: {response.text[:200]}"
            )
        return list(json_format.Parse(response.text, Payloads()).payloads)
