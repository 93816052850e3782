"""`model.complete`: one chat-completions call through the `openai` SDK.

The client is injected with max_retries=0, so Temporal's retry policy is the only one.
Each response is journaled before the activity returns, so a retry after a crash reuses it
instead of paying twice, under whom it is charged to; a call is admitted first under their
budgets (agentledger.activities.budget_gate): told to wrap up near the limit, refused
past it. Proposed tool calls are checked against the worker's registry
here, so the workflow sees clean verdicts and never runs a tool with bad arguments. A
value the model writes into an argument a tool declares secret is sealed in the vault, and
its marker stands for it, before the response is journaled or returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from temporalio import activity

from agentledger.activities.agent_metrics import record_mirror_lag
from agentledger.activities.agent_spans import AgentSpans
from agentledger.activities.budget_gate import BudgetGate
from agentledger.activities.leases import hold_lease, once_postgres_answers
from agentledger.activities.model_errors import classify_model_error
from agentledger.activities.model_rates import RatedTenants
from agentledger.activities.model_stream import plain_completion, streamed_completion
from agentledger.activities.proposals import proposed_call, proposed_subagent_call, subagent_schema
from agentledger.activities.provider_clients import ModelEndpoint, ProviderClients
from agentledger.activities.retry_notes import announce_retry
from agentledger.activities.text_stream import TextPieces, text_pieces
from agentledger.activities.verify import checks_without_judge
from agentledger.core import errors, faults
from agentledger.core.budgets import WRAP_UP_MESSAGE, Admission
from agentledger.core.constants import ACTIVITY_MODEL_COMPLETE, SUBAGENT_TOOL_PREFIX
from agentledger.core.pricing import Prices, price_of, usage_of
from agentledger.core.providers import with_retry_after_policy
from agentledger.core.results import VerifyResult
from agentledger.core.spec import JsonDict
from agentledger.core.wire import (
    ConversationCut,
    ModelCallInput,
    ModelCallResult,
    ProposedToolCall,
    SummaryRequest,
)
from agentledger.store.conversation import ConversationStore
from agentledger.store.mirror_store import MirrorStore
from agentledger.store.model_journal import Answer, ModelJournal
from agentledger.store.model_text import ModelTextStore
from agentledger.store.refused_data import refused_data_is_final
from agentledger.store.tenant_store import TenantStore
from agentledger.store.vault import MARKER, SecretScope, SecretVault
from agentledger.tools import ToolRegistry
from agentledger.tools.registry import UnknownToolError


def once_per_call_id(message: ChatCompletionMessage) -> ChatCompletionMessage:
    """The reply without a tool call whose id repeats an earlier one's. An id names one call,
    so running it again would do its side effect twice, and a provider refuses a conversation
    that answers one id twice."""
    seen: set[str] = set()
    calls = []
    for call in message.tool_calls or []:
        if call.id not in seen:
            seen.add(call.id)
            calls.append(call)
    if len(calls) == len(message.tool_calls or []):
        return message
    return message.model_copy(update={"tool_calls": calls})


@dataclass(frozen=True)
class Prompt:
    """What one model call sends: the messages and the tools offered."""

    messages: list[JsonDict]
    tools: list[JsonDict]

    def tokens(self) -> int:
        """About how many tokens it is (four characters a token): what a budget's admission
        expects of the call before the provider counts it."""
        return len(json.dumps(self.messages)) // 4 + len(json.dumps(self.tools)) // 4

    def wrapped_up(self) -> Prompt:
        """The same, told to finish with what it has, and offered no tool (its budget is
        nearly spent)."""
        return Prompt([*self.messages, {"role": "system", "content": WRAP_UP_MESSAGE}], [])


class ModelActivities:
    def __init__(
        self,
        client: openai.AsyncOpenAI | ProviderClients,
        registry: ToolRegistry,
        store: MirrorStore,
        journal: ModelJournal,
        conversation: ConversationStore,
        *,
        default_model: str,
        prices: Prices,
        identity: str,
        vault: SecretVault,
        stream_text: bool = True,
        spans: AgentSpans | None = None,
        rated: RatedTenants | None = None,
        budgets: BudgetGate | None = None,
    ) -> None:
        # Ask the provider to stream, and pass the reply's text to watchers as it comes
        # (`agentledger watch`); AGENTLEDGER_MODEL_STREAM=0 for a provider that cannot (its
        # reply then goes to watchers whole).
        self.stream_text = stream_text
        self.vault = vault
        self.identity = identity
        # Each run's calls go to the provider its profile names (None: the default client).
        self.clients = client if isinstance(client, ProviderClients) else ProviderClients(client)
        self.spans = spans or AgentSpans(enabled=False)
        self.registry = registry
        self.store = store
        self.journal = journal
        self.conversation = conversation
        self.default_model = default_model
        self.prices = prices
        self.rated = rated or RatedTenants(TenantStore(store.pool))
        self.texts = ModelTextStore(store.pool)
        self.budgets = budgets

    @activity.defn(name=ACTIVITY_MODEL_COMPLETE)
    async def complete(self, input: ModelCallInput) -> ModelCallResult:
        tenant = input.fast_path_tenant
        if tenant is not None and await once_postgres_answers(
            lambda: self.rated.has_rate(tenant), input.heartbeat_seconds
        ):
            raise errors.model_calls_rated(tenant)
        endpoint = self.clients.get(input.provider)
        model = input.model or self.default_model
        with self.spans.model_call(input, model, endpoint) as span:
            with refused_data_is_final():
                result = await self._complete(input, endpoint, model)
            span.ended(result)
            return result

    async def _complete(
        self, input: ModelCallInput, endpoint: ModelEndpoint, model: str
    ) -> ModelCallResult:
        info = activity.info()
        record_mirror_lag(input.mirror)
        # The claim reads the answer an earlier attempt journaled, in the same statement.
        journaled = await once_postgres_answers(
            lambda: self.store.begin_model_attempt(
                run_id=input.run_id,
                step_id=input.step_id,
                seq=input.seq,
                model=model,
                attempt=info.attempt,
                worker=self.identity,
                lease_seconds=input.heartbeat_seconds,
                input={"model": model, "messages": input.first_index + len(input.new_messages)},
                batch=input.mirror,
            ),
            input.heartbeat_seconds,
        )
        if input.mirror is not None:
            faults.fire("mirror.after_write")
        await announce_retry(self.store, input.run_id, input.step_id)
        prompt: Prompt | None = None
        admission = Admission()
        if journaled is None:
            prompt = await self._prompt(input)
            if self.budgets is not None and input.charge is not None:
                # Admitted under its budgets, or the run's end.
                admission = await self.budgets.admit(input, input.charge, prompt.tokens())
            if admission.verdict == "wrap_up":
                prompt = prompt.wrapped_up()
        try:
            return await self._answer(input, endpoint, model, journaled or prompt, admission)
        finally:
            if self.budgets is not None and input.charge is not None:
                await self.budgets.landed(input, input.charge, admission)

    async def _answer(
        self,
        input: ModelCallInput,
        endpoint: ModelEndpoint,
        model: str,
        asked: tuple[int, JsonDict] | Prompt | None,
        admission: Admission,
    ) -> ModelCallResult:
        """The reply: the response an earlier attempt journaled (`asked` is that one, with
        its attempt), else a new one to the `Prompt` asked."""
        info = activity.info()
        journaled = asked if isinstance(asked, tuple) else None
        if journaled is not None:
            # The response arrived before an earlier attempt died: it is paid for; reuse it.
            journal_attempt, raw = journaled
            await self.journal.mark_reused(
                input.run_id, input.step_id, journal_attempt, info.attempt
            )
            response = ChatCompletion.model_validate(raw)
            async with self._text(input) as on_text:  # this attempt's text is the reused reply
                on_text(response.choices[0].message.content or "")
        else:
            assert isinstance(asked, Prompt)
            journal_attempt = info.attempt
            response = await self._call(input, model, endpoint, asked)
            response = await self._seal_secret_arguments(input.run_id, response)
        usage = usage_of(response)
        priced = price_of(self.prices, model, usage, endpoint.price_provider)
        cost = priced or 0.0  # an unknown price is said so (`priced`), never taken for $0
        # A new answer is journaled with the attempt's report, in one statement. It is paid
        # for: should the result not build, it is journaled alone, for a retry to reuse.
        answer = (
            None
            if journaled is not None
            else Answer(model, response.model_dump(mode="json"), usage, cost, input.charge)
        )
        try:
            message = once_per_call_id(response.choices[0].message)
            delegates = {SUBAGENT_TOOL_PREFIX + name for name in input.subagents}
            proposals = [
                proposed_subagent_call(call.id, call.function.name, call.function.arguments)
                if call.function.name in delegates
                else proposed_call(
                    self.registry,
                    call.id,
                    call.function.name,
                    call.function.arguments,
                    input.allowed_tools,
                    input.needs_schema,
                )
                for call in message.tool_calls or []
                if call.type == "function"
            ]
            result = ModelCallResult(
                content=message.content,
                tool_calls=proposals,
                verdict=final_answer_verdict(self.registry, input, message.content, proposals),
                assistant_message=message.model_dump(exclude_none=True, exclude_unset=True),
                usage=usage,
                cost_usd=cost,
                model=response.model or model,
                attempt=info.attempt,
                journal_attempt=journal_attempt,
                priced=priced is not None,
                wrapped_up=admission.verdict == "wrap_up",
            )
        except Exception:
            if answer is not None:
                await self.journal.keep(input.run_id, input.step_id, info.attempt, answer)
            raise
        await once_postgres_answers(
            lambda: self.store.end_attempt(
                run_id=input.run_id,
                step_id=input.step_id,
                attempt=info.attempt,
                status="succeeded",
                output={"content": result.content, "tool_calls": [p.tool for p in proposals]},
                tokens_in=usage.input_tokens if journaled is None else 0,
                tokens_out=usage.output_tokens if journaled is None else 0,
                cost_usd=cost if journaled is None else 0.0,
                answer=answer,
            ),
            input.heartbeat_seconds,
        )
        faults.fire("model.after_response", model)
        return result

    def _text(self, input: ModelCallInput) -> contextlib.AbstractAsyncContextManager[TextPieces]:
        """Where this attempt's text goes to the run's subscribers as it comes."""
        return text_pieces(
            self.texts,
            input.run_id,
            input.step_id,
            activity.info().attempt,
            input.events_before or 0,
        )

    async def _prompt(self, input: ModelCallInput) -> Prompt:
        """What the call sends: the conversation (the store's, with this step's new
        messages), and the tools and sub-agents offered."""
        tools = [t.openai_schema() for t in self.registry.allowed(input.allowed_tools)]
        tools += [subagent_schema(name) for name in input.subagents]
        if input.summarize is not None:
            told = await self.conversation.extend(input.run_id, input.summarize.end, [])
            return Prompt(summary_request(remembered(told, input.forgotten), input.summarize), [])
        conversation = input.messages
        if conversation is None:
            conversation = await self.conversation.extend(
                input.run_id, input.first_index, input.new_messages
            )
        kept = remembered(conversation, input.forgotten)
        if input.cut is not None:
            kept = compacted(kept, input.cut)
        return Prompt([m for m in kept if m is not None], tools)

    async def _call(
        self, input: ModelCallInput, model: str, endpoint: ModelEndpoint, prompt: Prompt
    ) -> ChatCompletion:
        """The response, its text sent to the run's subscribers as it came."""
        request: dict[str, Any] = {
            "model": model,
            "messages": prompt.messages,
            "temperature": input.temperature,
            "timeout": endpoint.timeout(input.timeout_seconds),
        }
        if prompt.tools:
            request["tools"] = prompt.tools
        if input.max_tokens:
            request["max_tokens"] = input.max_tokens
        allowed = time_left(input.timeout_seconds)
        try:
            async with (
                hold_lease(
                    self.store,
                    run_id=input.run_id,
                    step_id=input.step_id,
                    heartbeat_seconds=input.heartbeat_seconds,
                ),
                asyncio.timeout(allowed),
            ):
                async with self._text(input) as on_text:
                    if self.stream_text:
                        return await streamed_completion(endpoint.client, request, on_text)
                    response = await plain_completion(endpoint.client, request)
                    on_text(response.choices[0].message.content or "")
                    return response
        except (openai.APIError, TimeoutError) as err:
            failure = (
                classify_model_error(err)
                if isinstance(err, openai.APIError)
                else errors.provider_too_slow(allowed)
            )
            if endpoint.provider is not None:
                failure = with_retry_after_policy(failure, endpoint.provider)
            await self.store.end_attempt(
                run_id=input.run_id,
                step_id=input.step_id,
                attempt=activity.info().attempt,
                status="failed",
                error=f"{failure.type}: {failure.message}",
            )
            raise failure from err

    async def _seal_secret_arguments(self, run_id: str, response: ChatCompletion) -> ChatCompletion:
        """The response with each raw value in a declared secret argument replaced by its
        marker (the value sealed in the vault), wherever the response repeats it."""
        scope = SecretScope()
        for choice in response.choices:
            for call in choice.message.tool_calls or []:
                if call.type != "function":
                    continue
                try:
                    secret_args = self.registry.get(call.function.name).secret_args
                    arguments = json.loads(call.function.arguments or "{}")
                except (UnknownToolError, json.JSONDecodeError):
                    continue  # refused later, never run
                if not secret_args or not isinstance(arguments, dict):
                    continue
                for name in secret_args:
                    value = arguments.get(name)
                    if isinstance(value, str) and value and not MARKER.search(value):
                        scope.mark(value)
        if not scope:
            return response
        await self.vault.seal(run_id, scope)
        raw = response.model_dump(mode="json")
        for choice in raw["choices"]:
            for call in choice["message"].get("tool_calls") or []:
                # Replace in the parsed arguments: in their JSON text a value may be escaped.
                with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
                    function = call["function"]
                    function["arguments"] = json.dumps(
                        scope.redact(json.loads(function["arguments"]))
                    )
        return ChatCompletion.model_validate(scope.redact(raw))


SUMMARY_PROMPT = (
    "You keep the memory of a long conversation between a person and an agent. Summarise "
    "the conversation below (and the summary so far, if any) in at most 300 words: what the "
    "person asked, what the agent found, answered and did, and any facts, names, numbers or "
    "decisions a later turn may need. Reply with the summary only."
)
# What one message may put into a summary request: the store keeps its whole text.
SUMMARY_MESSAGE_CHARS = 4000


def remembered(
    conversation: list[JsonDict], forgotten: list[tuple[int, int]]
) -> list[JsonDict | None]:
    """The conversation with each message a rolled-back turn left (its position in one of
    the `forgotten` ranges) as None: the store keeps it, the model no longer reads it."""
    return [
        None if any(start <= i < end for start, end in forgotten) else message
        for i, message in enumerate(conversation)
    ]


def summary_request(conversation: list[JsonDict | None], asked: SummaryRequest) -> list[JsonDict]:
    """The messages of a session's summary call: the turns to summarise, as a transcript."""
    lines = []
    if asked.previous:
        lines.append(f"Summary so far:\n{asked.previous}\n")
    for message in conversation[asked.first : asked.end]:
        if message is None:  # forgotten
            continue
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            calls = [c.get("function", {}).get("name") for c in message.get("tool_calls") or []]
            content = f"(called {', '.join(str(c) for c in calls)})" if calls else None
        if content:
            lines.append(f"{message.get('role', 'user')}: {content[:SUMMARY_MESSAGE_CHARS]}")
    return [
        {"role": "system", "content": SUMMARY_PROMPT},
        {"role": "user", "content": "\n".join(lines) or "(nothing was said)"},
    ]


def compacted(conversation: list[JsonDict | None], cut: ConversationCut) -> list[JsonDict | None]:
    """What a compacted session's model reads: its system message, the summary of the
    older turns, and the conversation from the cut on, word for word."""
    said = f"Earlier in this conversation (summarised):\n{cut.summary}"
    summary = {"role": "system", "content": said}
    return [*conversation[:1], summary, *conversation[cut.keep_from :]]


def final_answer_verdict(
    registry: ToolRegistry,
    input: ModelCallInput,
    content: str | None,
    proposals: list[ProposedToolCall],
) -> VerifyResult | None:
    """The checks' verdict on a final answer (a reply that proposes no tool call), when the
    call carried checks: the run's verify step then needs no activity of its own."""
    if input.checks is None or proposals or not isinstance(content, str):
        return None
    answer = content
    checks = checks_without_judge(registry, answer, input.checks, input.tools_used)
    return VerifyResult(passed=all(c.passed for c in checks), checks=checks)


# Left for the attempt to report its own timeout before Temporal's start-to-close ends it.
REPORT_SECONDS = 2.0


def time_left(timeout_seconds: float) -> float:
    """What the call may still take: the step's timeout, less what this attempt has spent
    (its claim on the step) and the moment it needs to say why it gave up."""
    info = activity.info()
    left = timeout_seconds
    if info.start_to_close_timeout is not None:
        spent = (datetime.now(UTC) - info.started_time).total_seconds()
        left = info.start_to_close_timeout.total_seconds() - spent
    return max(1.0, min(timeout_seconds, left) - REPORT_SECONDS)
