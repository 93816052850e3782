"""`verify.check`: the checks a final answer must pass before a run may complete.

Deterministic checks come first (sections, forbidden words, length, a JSON schema, counts,
and the checks that each tool the run used declares);
an optional LLM judge, asked through the run's own model client, comes last and only when
the deterministic checks pass, so a judge is never paid to read an answer already refused.
The judge's response is journaled like any model response: a retry reuses it instead of
paying again, and its tokens and cost go back to the run, which counts and budgets them.
"""

from __future__ import annotations

import json
import re

import jsonschema
import openai
from openai.types.chat import ChatCompletion
from temporalio import activity

from agentledger.activities.model_errors import classify_model_error
from agentledger.core.constants import ACTIVITY_VERIFY_CHECK
from agentledger.core.pricing import Prices, cost_usd, usage_of
from agentledger.core.results import CheckOutcome, VerifyResult
from agentledger.core.spec import JudgeSpec, VerifySpec
from agentledger.core.wire import VerifyInput
from agentledger.store.model_journal import ModelJournal
from agentledger.store.refused_data import refused_data_is_final
from agentledger.tools import ToolRegistry

JSON_BLOCK = re.compile(r"```json\s*(.*?)```", re.DOTALL)
JUDGE_PROMPT = (
    "You are a strict verifier. Judge the answer below against the rubric only. Reply with "
    'one JSON object: {"pass": true or false, "reason": "one sentence"}.'
)


class VerifyActivities:
    def __init__(
        self,
        client: openai.AsyncOpenAI,
        registry: ToolRegistry,
        journal: ModelJournal,
        *,
        default_model: str,
        prices: Prices,
    ) -> None:
        self.client = client
        self.registry = registry
        self.journal = journal
        self.default_model = default_model
        self.prices = prices

    @activity.defn(name=ACTIVITY_VERIFY_CHECK)
    async def check(self, input: VerifyInput) -> VerifyResult:
        with refused_data_is_final():
            return await self._check(input)

    async def _check(self, input: VerifyInput) -> VerifyResult:
        checks = checks_without_judge(self.registry, input.answer, input.spec, input.tools_used)
        if input.spec.judge is None or not all(c.passed for c in checks):
            return VerifyResult(passed=all(c.passed for c in checks), checks=checks)
        model = input.spec.judge.model or self.default_model
        journal_attempt, response = await self._judge_response(input, model)
        checks.append(judge_verdict(response))
        usage = usage_of(response)
        return VerifyResult(
            passed=all(c.passed for c in checks),
            checks=checks,
            judge_model=model,
            usage=usage,
            cost_usd=cost_usd(self.prices, model, usage),
            journal_attempt=journal_attempt,
        )

    async def _judge_response(self, input: VerifyInput, model: str) -> tuple[int, ChatCompletion]:
        """(the attempt that paid for it, the judge's response): a retry reuses it."""
        journaled = await self.journal.find(input.run_id, input.step_id, model)
        if journaled is not None:
            return journaled[0], ChatCompletion.model_validate(journaled[1])
        attempt = activity.info().attempt
        response = await self._ask_judge(input.answer, input.spec.judge, model)
        usage = usage_of(response)
        await self.journal.record(
            run_id=input.run_id,
            step_id=input.step_id,
            attempt=attempt,
            model=model,
            response=response.model_dump(mode="json"),
            usage=usage,
            cost_usd=cost_usd(self.prices, model, usage),
            charge=input.charge,
        )
        return attempt, response

    async def _ask_judge(self, answer: str, judge: JudgeSpec | None, model: str) -> ChatCompletion:
        assert judge is not None
        try:
            return await self.client.chat.completions.create(
                model=model,
                messages=[
                    {"role": "system", "content": JUDGE_PROMPT},
                    {"role": "user", "content": f"Rubric:\n{judge.rubric}\n\nAnswer:\n{answer}"},
                ],
                temperature=0,
                response_format={"type": "json_object"},
            )
        except openai.APIError as err:
            raise classify_model_error(err) from err


def checks_without_judge(
    registry: ToolRegistry, answer: str, spec: VerifySpec, tools_used: list[str]
) -> list[CheckOutcome]:
    """Every check that is computation only: the spec's, then those each tool that ran
    declares on the answer (see `Tool.answer_checks`)."""
    checks = deterministic_checks(answer, spec)
    for tool in registry.allowed(tools_used):
        if tool.answer_checks is not None:
            checks += [
                CheckOutcome(name=f"{tool.name}: {name}", passed=passed, detail=detail)
                for name, passed, detail in tool.answer_checks(answer)
            ]
    return checks


def judge_verdict(response: ChatCompletion) -> CheckOutcome:
    raw = response.choices[0].message.content or ""
    try:
        verdict = json.loads(raw)
        passed, reason = bool(verdict["pass"]), str(verdict.get("reason", ""))
    except (json.JSONDecodeError, KeyError, TypeError):
        passed, reason = False, f"the judge's reply was not a verdict: {raw[:200]}"
    return CheckOutcome(name="judge", passed=passed, detail=reason)


def deterministic_checks(answer: str, spec: VerifySpec) -> list[CheckOutcome]:
    text = answer.strip()
    checks = [
        CheckOutcome(
            name="min_chars",
            passed=len(text) >= spec.min_chars,
            detail=f"answer has {len(text)} characters, needs {spec.min_chars}",
        )
    ]
    checks += [
        CheckOutcome(
            name=f"has section {section!r}",
            passed=section.lower() in answer.lower(),
            detail=f"the answer must contain {section!r}",
        )
        for section in spec.required_sections
    ]
    checks += [
        CheckOutcome(
            name=f"no {word!r}",
            passed=word not in answer,
            detail=f"the answer must not contain {word!r}",
        )
        for word in spec.forbidden
    ]
    if spec.json_schema is not None:
        checks.append(schema_check(answer, spec.json_schema))
    for count in spec.counts:
        found = len(re.findall(count.pattern, answer, re.MULTILINE))
        ok = (count.equals is None or found == count.equals) and (
            count.at_least is None or found >= count.at_least
        )
        want = f"exactly {count.equals}" if count.equals is not None else f"{count.at_least}+"
        checks.append(
            CheckOutcome(name=count.name, passed=ok, detail=f"found {found}, needs {want}")
        )
    return checks


def schema_check(answer: str, schema: dict[str, object]) -> CheckOutcome:
    block = JSON_BLOCK.search(answer)
    if block is None:
        return CheckOutcome(name="json schema", passed=False, detail="no ```json block found")
    try:
        jsonschema.validate(json.loads(block.group(1)), schema)
    except json.JSONDecodeError as err:
        return CheckOutcome(name="json schema", passed=False, detail=f"invalid JSON: {err}")
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        return CheckOutcome(name="json schema", passed=False, detail=f"{where}: {err.message}")
    return CheckOutcome(name="json schema", passed=True, detail="the JSON block validates")
