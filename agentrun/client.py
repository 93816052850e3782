"""The one way every entry point connects to Temporal: same address, namespace, converter."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from agentrun.settings import Settings, SetupError


async def connect(settings: Settings, *, identity: str | None = None) -> Client:
    try:
        return await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            data_converter=pydantic_data_converter,
            identity=identity,
        )
    except RuntimeError as err:
        raise SetupError(
            f"cannot reach Temporal at {settings.temporal_address} ({err}); start the local "
            "stack with `python starter.py up`, or set TEMPORAL_ADDRESS"
        ) from err
