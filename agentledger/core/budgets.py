"""Spending limits above a run: a tenant's (or one of its credentials') budget per day or per
month, in USD and in tokens, and the verdict a model call or a start gets under it. Pure: the
spend is read by agentledger.store.budget_store, the clock is the caller's.

A budget is `advisory` (it warns at WARNING_FRACTION and when exceeded) or `enforcing` (it
also refuses). Under an enforcing budget, a model call is admitted one of three ways, by
what it is expected to take (`asking`: its prompt, and a reply as long as the longest of
the period, or as much as the largest call of the period):
- `go`: there is room for it beside what the calls in flight hold;
- `wrap_up`: after it, not one more such call would fit: the model is told to finish with
  what it has, and is offered no tool;
- `wait`: the calls in flight may take the room left: it waits for them to land, so that
  concurrent calls do not overshoot together; a call alone is always admitted, so the spend
  passes the limit by about one call at most;
and `exhausted` once the spend has reached the limit: the run ends `budget_exhausted`, and a
start of the tenant (or credential) is refused until the period resets (`reset_at`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field, model_validator

Period = Literal["day", "month"]
Mode = Literal["advisory", "enforcing"]
Unit = Literal["usd", "tokens"]
PERIODS: tuple[Period, ...] = ("day", "month")
MODES: tuple[Mode, ...] = ("advisory", "enforcing")
# The share of a budget at which `budget.warning` is raised.
WARNING_FRACTION = 0.8
# The subject of a budget of the whole tenant (else a credential: `key:<id>`, `oidc:...`).
WHOLE_TENANT = ""
# What a credential is written as: a key's, a token's subject, a hook's, a schedule's.
SUBJECT_KINDS = ("key:", "oidc:", "tenant:", "hook:", "schedule:", "operator")


class BudgetLimit(BaseModel):
    """One budget: what `subject` of `tenant` may spend per `period`, in USD, tokens or
    both (whichever is reached first)."""

    tenant: str = Field(min_length=1, max_length=200, description="whose budget")
    subject: str = Field(
        WHOLE_TENANT,
        max_length=500,
        description="'' for the whole tenant, else a credential (key:<id>, oidc:..., "
        "hook:<name>, schedule:<name>) whose own spend it limits",
    )
    period: Period = Field(description="day or month, in UTC")
    usd: float | None = Field(None, gt=0, description="dollars per period; None: no USD limit")
    tokens: int | None = Field(None, gt=0, description="tokens per period; None: no token limit")
    mode: Mode = Field(
        "advisory", description="advisory warns; enforcing also refuses starts and ends runs"
    )

    @model_validator(mode="after")
    def _a_limit(self) -> BudgetLimit:
        if self.usd is None and self.tokens is None:
            raise ValueError("a budget limits USD, tokens or both")
        if self.subject and not self.subject.startswith(SUBJECT_KINDS):
            raise ValueError(
                f"a budget's subject is a credential ({', '.join(SUBJECT_KINDS)}), not "
                f"{self.subject!r}"
            )
        return self

    @property
    def label(self) -> str:
        """`tenant acme, daily` / `key:81e4 of acme, monthly`: what an alert names."""
        who = f"tenant {self.tenant}" if not self.subject else f"{self.subject} of {self.tenant}"
        return f"{who}, {'daily' if self.period == 'day' else 'monthly'}"


class Spend(BaseModel):
    """What one budget's subject has spent in the current period, and what is in flight."""

    tokens: int = 0
    usd: float = 0.0
    largest_tokens: int = Field(0, description="the largest single call of the period")
    largest_out: int = Field(0, description="the longest reply of the period, in tokens")
    in_flight: int = Field(0, description="model calls admitted that have not landed yet")
    held_tokens: int = Field(0, description="what the calls in flight were expected to take")
    held_usd: float = 0.0


class Ask(BaseModel):
    """What one model call is expected to take, and holds while in flight."""

    tokens: int = 0
    usd: float = 0.0


def asking(spend: Spend, prompt_tokens: int) -> Ask:
    """What a call with a prompt of `prompt_tokens` is expected to take: its prompt and a
    reply as long as the period's longest, or the period's largest call if that is more;
    in USD at the period's price per token so far (0 before anything was paid)."""
    tokens = max(spend.largest_tokens, prompt_tokens + spend.largest_out)
    price = spend.usd / spend.tokens if spend.tokens else 0.0
    return Ask(tokens=tokens, usd=tokens * price)


class BudgetStatus(BudgetLimit):
    """A budget with what its subject has spent this period (`tenants show`)."""

    spent_usd: float = Field(description="dollars spent this period")
    spent_tokens: int = Field(description="tokens spent this period")
    share: float = Field(description="the greater of the USD and token shares spent")
    resets_at: datetime = Field(description="when the next period begins (UTC)")

    @classmethod
    def of(cls, limit: BudgetLimit, spend: Spend, now: datetime) -> BudgetStatus:
        _, reset = period_bounds(limit.period, now)
        return cls(
            **limit.model_dump(),
            spent_usd=round(spend.usd, 6),
            spent_tokens=spend.tokens,
            share=round(used(limit, spend), 4),
            resets_at=reset,
        )

    def text(self) -> str:
        return (
            f"budget {self.label}: {describe(self)}; spent ${self.spent_usd:.4f}, "
            f"{self.spent_tokens} tokens ({self.share:.0%}); resets "
            f"{self.resets_at.isoformat(timespec='seconds')}"
        )


Verdict = Literal["go", "wrap_up", "wait", "exhausted"]
SEVERITY: dict[Verdict, int] = {"go": 0, "wrap_up": 1, "wait": 2, "exhausted": 3}


class Admission(BaseModel):
    """A model call's verdict under every budget it counts against: the most severe."""

    verdict: Verdict = "go"
    budget: BudgetLimit | None = Field(None, description="the budget that decided it")
    reset_at: datetime | None = None
    reason: str | None = None
    held: bool = Field(False, description="the call holds a place until it lands")
    budgeted: bool = Field(False, description="its tenant or credential has a budget")


def period_bounds(period: Period, now: datetime) -> tuple[datetime, datetime]:
    """The current period's start and its reset (the next one's start), in UTC."""
    now = now.astimezone(UTC)
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return start, start + timedelta(days=1)
    start = start.replace(day=1)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return start, start.replace(year=year, month=month)


def used(limit: BudgetLimit, spend: Spend) -> float:
    """The share of the budget spent: the greater of its USD and token shares."""
    shares = []
    if limit.usd is not None:
        shares.append(spend.usd / limit.usd)
    if limit.tokens is not None:
        shares.append(spend.tokens / limit.tokens)
    return max(shares)


def verdict(limit: BudgetLimit, spend: Spend, ask: Ask | None = None) -> Verdict:
    """A model call's verdict under one enforcing budget (see the module's docstring); with
    no `ask`, whether a start may begin (exhausted, else go)."""
    worst: Verdict = "go"
    for cap, spent, held, need in (
        (limit.usd, spend.usd, spend.held_usd, ask.usd if ask else 0.0),
        (limit.tokens, float(spend.tokens), float(spend.held_tokens), ask.tokens if ask else 0),
    ):
        if cap is None:
            continue
        if spent >= cap:
            return "exhausted"
        if ask is None:
            continue
        each: Verdict = "go"
        if spend.in_flight and (need == 0 or spent + held + need > cap):
            each = "wait"  # its size is not known yet, or the calls in flight may take the room
        elif spent + held + 2 * need > cap:
            each = "wrap_up"  # there is room for this call, not for one more
        if SEVERITY[each] > SEVERITY[worst]:
            worst = each
    return worst


def exhausted_reason(limit: BudgetLimit, spend: Spend, reset_at: datetime) -> str:
    """Why a start or a call is refused, and when it may go again."""
    return (
        f"the {limit.label} budget ({describe(limit)}) is spent ({spent_text(spend)}); it "
        f"resets at {reset_at.isoformat(timespec='seconds')}; an operator raises it with "
        f"`agentledger tenants set {limit.tenant} --budget-{limit.period} ...`"
    )


def describe(limit: BudgetLimit) -> str:
    parts = []
    if limit.usd is not None:
        parts.append(f"${limit.usd:g}")
    if limit.tokens is not None:
        parts.append(f"{limit.tokens} tokens")
    return " / ".join(parts) + f" per {limit.period}, {limit.mode}"


def spent_text(spend: Spend) -> str:
    return f"${spend.usd:.4f}, {spend.tokens} tokens"


# The system message a model call gets when its tenant's budget is nearly spent.
WRAP_UP_MESSAGE = (
    "The budget for this work is nearly spent: this is your last reply. Do not call any "
    "tool. Finish now with what you have: give your final answer, in the format asked for, "
    "and say what you could not do."
)
