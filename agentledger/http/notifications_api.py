"""Your tenant's notification webhooks over REST (agentledger.client.notifications):
added, listed and removed by its admins; what became of each delivery, and one made again."""

from __future__ import annotations

from starlette.routing import Route

from agentledger.core.webhook_models import NewSubscription, PushSubscription, WebhookDelivery
from agentledger.http import bodies
from agentledger.http.endpoints import Call, Endpoint, routes_of

HOOKS = "/v1/notifications"


async def listed(call: Call[None]) -> list[PushSubscription]:
    """Your tenant's notification webhooks (never their secrets)."""
    return await call.runs.notifications.listed()


async def subscribe(call: Call[bodies.Subscribe]) -> NewSubscription:
    """Tell `url` what your tenant's runs do from now on, however they were started:
    `approval.requested`, `approval.decided`, `run.finished`, `run.failed` (and budget
    alerts), each signed with the secret (`AgentLedger-Signature: t=...,v1=...`; a random
    one, shown this once, if you send none) and retried with backoff until the receiver
    answers 2xx; with `format: slack`, as a message a Slack incoming webhook takes."""
    body = call.input
    return await call.runs.notifications.subscribe(
        body.name, body.url, secret=body.secret, format=body.format
    )


async def remove(call: Call[bodies.NoFields]) -> bodies.Removed:
    """Stop telling this webhook (404 for one your tenant does not have)."""
    await call.runs.notifications.remove(call.path("name"))
    return bodies.Removed(name=call.path("name"))


async def deliveries(call: Call[None]) -> list[WebhookDelivery]:
    """Each delivery to this webhook: its event, status, attempts, the last answer."""
    return await call.runs.notifications.deliveries(call.path("name"))


async def redeliver(call: Call[bodies.NoFields]) -> WebhookDelivery:
    """Make this delivery again (its id URL-encoded: `#` is `%23`): the recorded body, under
    its id, signed afresh and retried as any delivery; `pending` until its attempt lands."""
    return await call.runs.notifications.redeliver(call.path("name"), call.path("delivery_id"))


ENDPOINTS = [
    Endpoint("GET", HOOKS, listed, "admin", answer=list[PushSubscription]),
    Endpoint(
        "POST", HOOKS, subscribe, "admin", bodies.Subscribe, answer=NewSubscription, status=201
    ),
    Endpoint(
        "POST", HOOKS + "/{name}/remove", remove, "admin", bodies.NoFields, answer=bodies.Removed
    ),
    Endpoint(
        "GET", HOOKS + "/{name}/deliveries", deliveries, "admin", answer=list[WebhookDelivery]
    ),
    Endpoint(
        "POST",
        HOOKS + "/{name}/deliveries/{delivery_id}/redeliver",
        redeliver,
        "admin",
        bodies.NoFields,
        answer=WebhookDelivery,
        status=202,
    ),
]


def routes() -> list[Route]:
    return routes_of(ENDPOINTS)
