"""The API describes itself from its routes' declarations: `/openapi.json` names every field
of every route's body, query and answer, and describes the door's own, so `/docs` reads as
a reference, not as "{run_id}", "receipt", "end". Built in process from the app itself."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel
from starlette.routing import Route

from agentledger import RunClient
from agentledger.core import spec as run_specs
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.http_config import HttpConfig
from agentledger.http import bodies
from agentledger.http.app import create_app
from agentledger.http.endpoints import EndpointRoute
from agentledger.http.openapi import described


def component(spec: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The models a schema names: through $ref, lists and unions."""
    if "$ref" in schema:
        return [spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]]
    if schema.get("type") == "array":
        return component(spec, schema["items"])
    parts = schema.get("anyOf", []) + schema.get("oneOf", [])
    return [found for part in parts for found in component(spec, part)]


def field_names(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_the_api_description_names_every_field_of_every_route() -> None:
    app = create_app(RunClient.lazy(AgentLedgerConfig.load({})), HttpConfig())
    spec = described(app.routes)
    declared = [route.declared for route in app.routes if isinstance(route, EndpointRoute)]
    served = {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route) and route.path.startswith("/v1")
        for method in (route.methods or set()) - {"HEAD"}
    }
    assert served == {(each.method, each.path) for each in declared}, "every /v1 route declared"
    for each in declared:
        operation = spec["paths"][each.path][each.method.lower()]
        where = f"{each.method} {each.path}"
        assert len(operation["summary"]) >= 20 and "{" not in operation["summary"], where
        assert "Role: " in operation["description"], where
        for parameter in operation["parameters"]:
            assert parameter["description"], (where, parameter)
        if each.query is not None:
            named = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
            assert named == field_names(each.query), where
        if each.body is not None:
            [body] = component(
                spec, operation["requestBody"]["content"]["application/json"]["schema"]
            )
            assert set(body["properties"]) == field_names(each.body), where
        answers = [a for status, a in operation["responses"].items() if status.startswith("2")]
        assert answers, where
        for answer in answers:
            [media] = answer["content"].values()
            models = component(spec, media["schema"])
            assert models and all(model.get("properties") for model in models), where
        refusal = operation["responses"]["401"]["content"]["application/json"]["schema"]
        assert component(spec, refusal)[0]["properties"].keys() == {"error"}
    # Every field a route takes or gives is described, for people reading /docs: the
    # door's bodies and the client's answers (AG-UI's own types are the protocol's, and a
    # backlog task's run spec is the tenant policy's model, described in docs/using.md).
    undescribed = [
        f"{model.__name__}.{name}"
        for model in reachable_models(declared)
        if model.__module__.startswith("agentledger.") and model.__module__ != run_specs.__name__
        for name, field in model.model_fields.items()
        if not field.description
    ]
    assert not undescribed, undescribed
    assert bodies.StartRun in reachable_models(declared)


def reachable_models(declared: list[Any]) -> set[type[BaseModel]]:
    """The models the routes' bodies, queries and answers are made of."""
    found: set[type[BaseModel]] = set()

    def walk(kind: Any) -> None:
        for each in typing.get_args(kind):
            walk(each)
        if isinstance(kind, type) and issubclass(kind, BaseModel) and kind not in found:
            found.add(kind)
            for field in kind.model_fields.values():
                walk(field.annotation)

    for each in declared:
        for kind in (each.body, each.query, each.answer):
            walk(kind)
    return found
