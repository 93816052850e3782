"""What crosses the webhook activities and the task notifier's workflow: one input model and
one result each (agentledger.activities.webhooks, agentledger.workflows.task_notifier)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from agentledger.core.constants import BUDGET_ALERT_ID_PREFIX, TASK_NOTIFIER_ID_PREFIX
from agentledger.core.keys import id_part
from agentledger.core.spec import JsonDict

# What a subscription's deliveries carry: agentledger's JSON body, or a Slack message made
# from it (agentledger.core.slack_messages).
DeliveryFormat = Literal["json", "slack"]


class DeliveryInput(BaseModel):
    """One delivery: its id (the same id on every retry, and for the receiver to drop a
    repeat), the subscription it goes to (its URL, secret and credentials are read from
    Postgres, never carried in history), and the JSON body."""

    delivery_id: str = Field(min_length=1, max_length=500)
    subscription_id: str = Field(min_length=1, max_length=500)
    tenant: str
    run_id: str | None = None
    event: str = Field(min_length=1, max_length=200)
    body: JsonDict


class DeliveryResult(BaseModel):
    status: str = Field(description="delivered, or dropped: the subscription is gone")
    attempts: int
    status_code: int | None = None


class ChangesInput(BaseModel):
    run_id: str
    after_seq: int = Field(0, ge=0)
    wait_seconds: float = Field(60.0, gt=0, description="how long to wait for a first change")


class RunEventRow(BaseModel):
    seq: int
    type: str
    step_id: str | None = None
    data: JsonDict = Field(default_factory=dict)
    at: datetime


class RunChanges(BaseModel):
    """The run's events after `after_seq` as the mirror holds them (none if nothing came
    within the wait), and the receipt's summary once the run has ended."""

    events: list[RunEventRow] = Field(default_factory=list)
    ended: bool = False
    summary: JsonDict | None = None


class NotifierInput(BaseModel):
    """Deliver the task's state changes to one push subscription until the task ends."""

    subscription_id: str
    tenant: str
    run_id: str
    context_id: str
    after_seq: int = Field(0, ge=0, description="events up to this one are told already")
    state: str | None = Field(None, description="the state told last")


class RunNotifierInput(BaseModel):
    """Tell the tenant's notification webhooks what the run does, until it ends."""

    tenant: str
    run_id: str
    after_seq: int = Field(0, ge=0, description="events up to this one are told already")
    agent: str | None = Field(None, description="the run's agent, named in what is told")


def run_notifier_id(run_id: str) -> str:
    """The workflow id of the run's notifier: one per run."""
    return TASK_NOTIFIER_ID_PREFIX + "run." + run_id


def redelivery_id(delivery_id: str, attempts: int) -> str:
    """The workflow id of a delivery made again after its `attempts`: one per request, so a
    request sent twice before it is made is made once."""
    return f"{TASK_NOTIFIER_ID_PREFIX}again.{attempts}.{delivery_id}"


def notifier_id(subscription_id: str) -> str:
    """The workflow id of the notifier for a push subscription: one per subscription."""
    return TASK_NOTIFIER_ID_PREFIX + subscription_id


class PushSubscription(BaseModel):
    """Where a task's state changes, or a tenant's notifications, are delivered (its secret
    is never read back)."""

    subscription_id: str = Field(description="its id: the tenant's (or the run's) and its name")
    tenant: str = Field(description="the tenant it belongs to")
    run_id: str | None = Field(description="the run it follows; null: the tenant's runs")
    name: str = Field(description="its name")
    url: str = Field(description="where deliveries are POSTed")
    format: DeliveryFormat = Field(
        "json", description="json: agentledger's body; slack: a Slack incoming webhook's message"
    )
    auth_scheme: str | None = Field(None, description="the Authorization scheme sent, if any")
    created_at: datetime = Field(description="when it was added")


class NewSubscription(PushSubscription):
    """A subscription just made: `secret` (which signs every delivery) is shown this once."""

    secret: str = Field(description="signs every delivery; shown this once")


class WebhookDelivery(BaseModel):
    """One delivery and what came of it."""

    delivery_id: str = Field(description="the same on every attempt (AgentLedger-Delivery)")
    subscription_id: str = Field(description="where it goes")
    tenant: str = Field(description="the tenant whose run it tells of")
    run_id: str | None = Field(description="the run it tells of")
    event: str = Field(description="what it tells: approval.requested, run.finished, ...")
    status: str = Field(description="pending, retrying, delivered or failed")
    attempts: int = Field(description="attempts made so far")
    last_status_code: int | None = Field(None, description="the receiver's last HTTP status")
    last_error: str | None = Field(None, description="why the last attempt failed, if it did")
    created_at: datetime = Field(description="when its first attempt was made")
    attempted_at: datetime | None = Field(None, description="when its last attempt was made")
    delivered_at: datetime | None = Field(None, description="when the receiver took it")


class StoredArtifact(BaseModel):
    """An output the run stored outside Temporal's history (its answer among them)."""

    artifact_id: str
    name: str
    media_type: str
    size_bytes: int
    step_id: str | None = None
    content: bytes = b""


class TenantInput(BaseModel):
    tenant: str = Field(min_length=1, max_length=200)


class TenantSubscription(BaseModel):
    """One of a tenant's webhooks with no run: where its tenant-wide notices go."""

    subscription_id: str
    name: str


class BudgetAlertInput(BaseModel):
    """Deliver one budget alert (`budget.warning`, `budget.exceeded`) to each of the
    tenant's webhooks with no run."""

    tenant: str
    event: str
    body: JsonDict


def budget_alert_id(tenant: str, subject: str, period: str, start: datetime, kind: str) -> str:
    """The workflow id of an alert's deliveries: one per budget, period and kind."""
    parts = [tenant, subject or "tenant", period, start.strftime("%Y-%m-%d"), kind]
    return BUDGET_ALERT_ID_PREFIX + ".".join(id_part(p, dots=False) for p in parts)
