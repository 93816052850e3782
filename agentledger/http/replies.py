"""Answers as JSON: pydantic models in their JSON form, dates as ISO text."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response


def plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def answer(value: Any, status: int = 200) -> Response:
    body = json.dumps(plain(value), default=str, separators=(",", ":"))
    return Response(body, status, media_type="application/json")
