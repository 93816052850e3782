"""The base of the one config and its groups: values come only from what `read` hands over.

`read` gives every variable as an init value, so a value meets the same validators from the
environment as from a mapping a test or an edge passes. pydantic-settings' own environment
source would JSON-decode dict-typed fields first, which AGENTLEDGER_ENCRYPTION_KEYS (`id:key,...`)
is not: it never sees a variable.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


def env(name: str, default: Any = None, description: str = "") -> Any:
    """A setting read from the variable `name`: named once, with its description."""
    return Field(default, validation_alias=name, description=description)


class ConfigBase(BaseSettings):
    """`AgentLedgerConfig` and each of its groups (`HttpConfig`): frozen, and read from the
    variables an edge hands to `read`, never from pydantic-settings' own sources."""

    model_config = SettingsConfigDict(frozen=True, case_sensitive=True, extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)
