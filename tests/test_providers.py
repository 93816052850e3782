"""Named providers: one worker serves agents on different providers, each call reaching its
own endpoint with its own key and headers; a fallback on another provider; each provider's
retry-after ceiling; prices from genai-prices, and a model with no known price shown as
unknown, never $0."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from genai_prices import Usage as TableUsage
from genai_prices import calc_price
from temporalio.exceptions import ApplicationError

from agentledger.cli.render import receipt_markdown
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.core.pricing import price_of
from agentledger.core.providers import Provider, load_providers, with_retry_after_policy
from agentledger.core.results import Usage
from agentledger.dev.offline_model import OfflineModelServer, Reply, offline_planner
from agentledger.profiles import Agent
from agentledger.store.metrics import stats
from tests import client_ops as ops
from tests.support import rows, run_result

TASK = "Summarize our invoice policy."
FAST = {"heartbeat_seconds": 5, "initial_retry_seconds": 0.2}


def test_providers_load_from_inline_json_or_a_file(tmp_path):
    inline = '{"local": {"base_url": "http://127.0.0.1:8000/v1/", "timeout_seconds": 30}}'
    assert load_providers(inline)["local"].base_url == "http://127.0.0.1:8000/v1"
    path = tmp_path / "providers.yaml"
    path.write_text(
        "providers:\n  anthropic:\n    base_url: https://api.anthropic.com/v1/\n"
        "    api_key_env: ANTHROPIC_API_KEY\n"
    )
    loaded = AgentLedgerConfig.load({"AGENTLEDGER_PROVIDERS": str(path)}).providers
    assert load_providers(loaded)["anthropic"].api_key_env == "ANTHROPIC_API_KEY"
    for bad, says in (
        ('{"x": {"base_url": "ftp://nowhere"}}', "provider 'x': base_url"),
        ('{"x": {"base_url": "http://a", "api_key_env": "A", "api_key_file": "/k"}}', "not both"),
        ('{"x": {"base_url": "http://a", "colour": "red"}}', "colour"),
        ('{"default": {"base_url": "http://a"}}', "the worker's own client"),
        (str(tmp_path / "absent.yaml"), "cannot read"),
    ):
        with pytest.raises(SetupError, match=says):
            load_providers(bad)


def test_a_providers_retry_after_policy_sets_the_next_attempts_delay():
    asked = ApplicationError("slow down", type="RateLimited", next_retry_delay=timedelta(hours=1))
    trusted = Provider(base_url="http://a", max_retry_after_seconds=30)
    capped = with_retry_after_policy(asked, trusted)
    assert capped.next_retry_delay == timedelta(seconds=30)
    assert (capped.type, capped.message, capped.non_retryable) == (
        "RateLimited",
        "slow down",
        False,
    )
    ignored = with_retry_after_policy(
        asked, Provider(base_url="http://a", honour_retry_after=False)
    )
    assert ignored.next_retry_delay is None, "the retry policy's backoff decides"
    short = ApplicationError("slow down", type="RateLimited", next_retry_delay=timedelta(seconds=2))
    assert with_retry_after_policy(short, trusted) is short


def test_prices_come_from_the_table_unless_the_user_says_and_unknown_is_none():
    usage = Usage(input_tokens=12_000, output_tokens=3_000)
    table = calc_price(TableUsage(input_tokens=12_000, output_tokens=3_000), "gpt-4o-mini")
    assert price_of({}, "gpt-4o-mini", usage) == pytest.approx(float(table.total_price))
    assert price_of({}, "gpt-4o-mini", usage, "openai") == pytest.approx(float(table.total_price))
    # The user's own table wins over the maintained one.
    assert price_of({"gpt-4o-mini": (1.0, 2.0)}, "gpt-4o-mini", usage) == 0.018
    # Unknown: a model no table knows, or a known name served by an unlisted provider.
    assert price_of({}, "my-finetune-7b", usage) is None
    assert price_of({}, "gpt-4o-mini", usage, "my-vllm") is None


def provider_server(model_answers: dict[str, Reply] | None = None) -> OfflineModelServer:
    """A scripted OpenAI-compatible server: the offline planner, or a set reply per model."""

    def respond(request: dict[str, Any]) -> Reply:
        return (model_answers or {}).get(request["model"]) or offline_planner(request)

    return OfflineModelServer(respond)


async def result_of(client, run_id):
    return await run_result(client, run_id)


@pytest.mark.timeout(150)
async def test_one_worker_serves_agents_on_two_providers(
    client, settings, pool, worker, model_server, tmp_path, monkeypatch
):
    limited = Reply(
        {"error": {"message": "slow down", "type": "rate_limit"}},
        status=429,
        headers={"retry-after": "3600"},
    )
    monkeypatch.setenv("ALPHA_KEY", "alpha-secret")
    key_file = tmp_path / "beta.key"
    key_file.write_text("beta-secret\n")
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    with provider_server({"m-down": limited}) as alpha, provider_server() as beta:
        providers = {
            # A self-hosted model: no price is known for it.
            "alpha": {
                "base_url": alpha.base_url,
                "api_key_env": "ALPHA_KEY",
                "headers": {"x-team": "alpha"},
                # Its 429s ask for an hour; this provider's retries wait a second at most.
                "max_retry_after_seconds": 1,
            },
            # OpenAI's API behind another URL: priced from the table as OpenAI's.
            "beta": {"base_url": beta.base_url, "api_key_file": str(key_file), "system": "openai"},
        }
        settings = settings.model_copy(update={"providers": json.dumps(providers)})
        agents = [
            Agent(
                name="alpha-agent",
                instructions="Answer from the notes.",
                model={"model": "m-alpha", "provider": "alpha"},
                tools=["search_notes"],
            ),
            Agent(
                name="beta-agent",
                instructions="Answer from the notes.",
                model={"model": "gpt-4o-mini", "provider": "beta"},
                tools=["search_notes"],
            ),
            # Down on alpha, so it moves to its fallback on beta.
            Agent(
                name="fallback-agent",
                instructions="Answer from the notes.",
                model={"model": "m-down", "provider": "alpha"},
                tools=["search_notes"],
                failures={
                    "fallback_model": "gpt-4o-mini",
                    "fallback_provider": "beta",
                    "model_attempts_before_fallback": 2,
                },
            ),
            Agent(
                name="lost-agent",
                instructions="Answer.",
                model={"model": "m-alpha", "provider": "nowhere"},
            ),
        ]
        default_calls = len(model_server.requests)
        async with worker(settings=settings):
            started = {
                a.name: await ops.start_run(
                    client,
                    a.spec(
                        TASK,
                        tenant=tenant,
                        idempotency_key=f"k-{uuid.uuid4().hex}",
                        timeouts=FAST,
                    ),
                    task_queue=settings.task_queue,
                )
                for a in agents
            }
            results = {name: await result_of(client, s.run_id) for name, s in started.items()}

    assert {n: r.status.value for n, r in results.items()} == {
        "alpha-agent": "completed",
        "beta-agent": "completed",
        "fallback-agent": "completed",
        "lost-agent": "failed",
    }
    assert "no model provider named 'nowhere'" in (results["lost-agent"].error or "")
    assert "alpha, beta" in (results["lost-agent"].error or "")
    # Each call reached its own provider, with that provider's key and headers.
    assert {r["model"] for r in alpha.requests} == {"m-alpha", "m-down"}
    assert {r["model"] for r in beta.requests} == {"gpt-4o-mini"}
    assert [r["model"] for r in alpha.requests].count("m-down") == 2, "then the fallback"
    assert {h["authorization"] for h in alpha.request_headers} == {"Bearer alpha-secret"}
    assert {h["x-team"] for h in alpha.request_headers} == {"alpha"}
    assert {h["authorization"] for h in beta.request_headers} == {"Bearer beta-secret"}
    assert not any("x-team" in h for h in beta.request_headers)
    assert len(model_server.requests) == default_calls, "none went to the default client"

    # Prices: the table's for gpt-4o-mini as OpenAI serves it; unknown for m-alpha.
    beta_receipt = await ops.receipt(pool, started["beta-agent"].run_id)
    steps = await rows(
        pool,
        "SELECT tokens_in, tokens_out, cost_usd::float8 AS cost FROM steps"
        " WHERE run_id = %s AND type = 'model_call' AND final",
        started["beta-agent"].run_id,
    )
    expected = sum(
        float(
            calc_price(
                TableUsage(input_tokens=s["tokens_in"], output_tokens=s["tokens_out"]),
                "gpt-4o-mini",
                provider_id="openai",
            ).total_price
        )
        for s in steps
    )
    assert beta_receipt["cost_usd"] == pytest.approx(expected, abs=2e-6) and expected > 0
    assert beta_receipt["unpriced_models"] == []
    alpha_receipt = await ops.receipt(pool, started["alpha-agent"].run_id)
    assert (alpha_receipt["cost_usd"], alpha_receipt["unpriced_models"]) == (0.0, ["m-alpha"])
    assert "**cost:** unknown for m-alpha" in receipt_markdown(alpha_receipt)
    assert "$0.000000" not in receipt_markdown(alpha_receipt).split("**cost:**")[1].split("\n")[0]
    figures = await stats(pool, tenant=tenant)
    assert (figures.unpriced_model_calls, figures.unpriced_models) == (2, ["m-alpha"])
