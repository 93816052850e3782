"""The operator's policy through the HTTP door, under random operations on the real stack.

Hypothesis drives two tenants' callers through `agentledger serve`'s routes: API keys of
every role (one revoked), OIDC tokens with random roles, starts with and without an agent,
backlog tasks whose own specs name agents of their own, widen or narrow tools and add or
drop approvals, decisions (approvals with merge patches, replacements and edits the tool
would refuse, rejections) by anyone on any run, and admins changing their tenant's
two-person rule. The tenants' policies are drawn first: tenant A's tickets need an approver
in role `support` (and, drawn, two people for every approval), B's messages two approvers
(and, drawn, its requesters may approve); either may let runners send free-form specs.
After every step:
- no tool whose tenant's policy (as the run started) requires approval ran without an
  approval by identities in the required role (two, distinct, for a two-person rule),
  none of them the run's requester (whom the policy does not let approve);
- every receipt's requester is the credential that asked for the run, and every decider an
  authenticated identity whose decision the door answered as taken;
- every applied edit equals what was sent: the arguments the tool ran with are the proposed
  ones with each approver's merge patch or replacement applied, in order;
- no tenant reached another's run: each answer on another tenant's run reads exactly as one
  on a missing run, and no decider or requester of a run is of another tenant.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import openai
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import agentledger.demo
from agentledger import RunClient
from agentledger.core import merge_patch
from agentledger.core.access import GRANTS
from agentledger.core.backlog_models import child_run_id
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.http_config import HttpConfig
from agentledger.core.identity import Identity
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.http.server import bind, serve, url_of
from agentledger.store import tool_sets
from agentledger.store.db import install_tool_schema, open_pool
from agentledger.worker.worker_factory import AgentWorkers, WorkerDeps, build_worker
from tests.http_support import Issuer, bearer
from tests.support import NOTIFY_TASK

T = TypeVar("T")
TICKET = {"title": "Refund for order 42", "body": "The customer asked twice."}
TASKS = {"ticket": f"call create_ticket {json.dumps(TICKET)}", "notify": NOTIFY_TASK}
PROFILE = {
    "desk": {
        "instructions": "You help the support desk.",
        "tools": ["search_notes", "send_message", "create_ticket"],
        "approval": {"always": ["create_ticket"]},
    }
}
WORKER_NAME = "policy-door-worker"
ISSUER = "https://id.policy.example"
OIDC_SUBJECTS = ("dee", "eli")


@dataclass
class Credential:
    """One way in: a key (its identity, roles), or a token made for each call."""

    tenant: str
    label: str
    identity: Identity
    roles: frozenset[str]
    key: str | None = None  # None: an OIDC token, minted per call
    revoked: bool = False

    def may(self, need: str) -> bool:
        return any(need in GRANTS.get(role, frozenset()) for role in self.roles)

    def decides_as(self, role: str) -> bool:
        return self.may("approver") and (role in self.roles or (self.may(role) and role in GRANTS))


@dataclass
class Run:
    run_id: str
    tenant: str
    requester: str  # the identity's ref
    policy: dict[str, Any]  # the tenant's policy when it started
    deciders: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # ref -> sent


class Stack:
    """The worker and the HTTP door on a loop of their own (Hypothesis runs rules
    synchronously), with an OIDC issuer and the operator's profile."""

    def __init__(self, address: str, database_url: str, converter: Any, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.model = OfflineModelServer()
        self.model.__enter__()
        self.issuer = Issuer(ISSUER)
        self.issuer.server.__enter__()
        agents = tmp / "agents.yaml"
        agents.write_text(json.dumps(PROFILE))
        self.settings = AgentLedgerConfig.load({}).model_copy(
            update={
                "temporal_address": address,
                "database_url": database_url,
                "openai_base_url": self.model.base_url,
                "task_queue": f"policy-{uuid.uuid4().hex[:8]}",
                "agents": str(agents),
                "drain_seconds": 0.0,
            }
        )
        self.call(self._open(address, converter))

    def call(self, work: Coroutine[Any, Any, T], seconds: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(seconds)

    async def _open(self, address: str, converter: Any) -> None:
        self.client = await Client.connect(address, data_converter=converter)
        self.pool = await open_pool(self.settings.require_database(), max_size=10)
        registry = agentledger.demo.registry
        await install_tool_schema(self.pool, registry.schema())
        await tool_sets.join(self.pool, self.settings.task_queue, WORKER_NAME, registry.names())
        model = openai.AsyncOpenAI(base_url=self.model.base_url, api_key="x", max_retries=0)
        deps = WorkerDeps(pool=self.pool, model_client=model, registry=registry)
        self.workers: AgentWorkers = build_worker(self.client, self.settings, deps)
        await self.workers.__aenter__()
        sock = bind("127.0.0.1", 0)
        self.door_stop = asyncio.Event()
        self.operator = RunClient(self.client, self.settings)
        limits = HttpConfig().model_copy(
            update={
                "requests_per_second": 10_000.0,
                "auth_failures": 10_000,
                "oidc_jwks_url": self.issuer.jwks_url,
                "oidc_issuer": ISSUER,
                "oidc_audience": "agentledger",
            }
        )
        self.door = asyncio.create_task(
            serve(self.operator, limits, ready=lambda url: None, sock=sock, stop=self.door_stop)
        )
        self.http = httpx.Client(base_url=url_of(sock), timeout=60)

    async def _close(self) -> None:
        self.http.close()
        self.door_stop.set()
        await self.door
        await self.workers.__aexit__(None, None, None)
        await tool_sets.leave(self.pool, self.settings.task_queue, WORKER_NAME)
        await self.operator.close()
        await self.pool.close()

    def close(self) -> None:
        try:
            self.call(self._close())
        finally:
            self.issuer.server.__exit__(None, None, None)
            self.model.__exit__(None, None, None)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


STACK: Stack | None = None


def ref_of(decision: dict[str, Any]) -> str:
    """The identity a recorded decision names, compared as `Identity.ref`."""
    decider = decision["decider"]
    return "nobody" if decider is None else f"{decider['kind']}:{decider['id']}"


edits = st.sampled_from(["none", "patch", "remove required", "replace"])
# Who decides: mostly approvers (ana decides in `support` too, cy's key is revoked, eli is a
# token's subject in `approver` and `support`), and the others, who may not.
deciders = st.sampled_from(
    ["ana", "bo", "eli", "ana", "bo", "eli", "cy", "admin", "runner", "viewer"]
)
variants = st.sampled_from(["no agent", "desk", "own agent", "widened", "dropped approvals"])


class PolicyDoor(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        assert STACK is not None
        self.stack = STACK
        mark = uuid.uuid4().hex[:6]
        self.tenants = [f"pa-{mark}", f"pb-{mark}"]
        self.credentials: list[Credential] = []
        self.runs: list[Run] = []
        self.policies: dict[str, dict[str, Any]] = {}

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        return self.stack.call(work)

    # ------------------------------------------------------------ set-up

    @initialize(
        free_a=st.sampled_from(["runner", "admin"]),
        free_b=st.sampled_from(["runner", "admin"]),
        two_a=st.booleans(),
        mine_b=st.booleans(),
    )
    def policies_and_keys(self, free_a: str, free_b: str, two_a: bool, mine_b: bool) -> None:
        a, b = self.tenants
        operator = self.stack.operator
        self.policies[a] = self.call(
            operator.tenants.set_policy(
                a,
                {
                    "free_form": free_a,
                    "two_person": two_a,
                    "rules": [{"tool": "create_ticket", "role": "support"}],
                },
            )
        ).model_dump(mode="json")
        self.policies[b] = self.call(
            operator.tenants.set_policy(
                b,
                {
                    "free_form": free_b,
                    "requester_may_approve": mine_b,
                    "rules": [{"tool": "send_message", "approvers": 2}],
                },
            )
        ).model_dump(mode="json")
        for tenant in self.tenants:
            for label, role, decides in (
                ("runner", "runner", []),
                ("admin", "admin", []),
                ("viewer", "viewer", []),
                ("ana", "approver", ["support"]),
                ("bo", "approver", []),
                ("cy", "approver", ["support"]),
            ):
                made = self.call(
                    operator.keys.create(
                        tenant, role, name=f"{label} of {tenant}", approval_roles=decides
                    )
                )
                self.credentials.append(
                    Credential(
                        tenant,
                        label,
                        Identity.of_key(made.key_id, made.name),
                        frozenset({role, *decides}),
                        key=made.key,
                    )
                )
            revoked = self.by(tenant, "cy")
            self.call(operator.keys.revoke(revoked.identity.id))
            revoked.revoked = True
            for subject, roles in (("dee", {"runner"}), ("eli", {"approver", "support"})):
                self.credentials.append(
                    Credential(
                        tenant,
                        subject,
                        Identity.of_token(ISSUER, f"{subject}-{tenant}"),
                        frozenset(roles),
                    )
                )

    def by(self, tenant: str, label: str) -> Credential:
        return next(c for c in self.credentials if c.tenant == tenant and c.label == label)

    def headers(self, who: Credential) -> dict[str, str]:
        if who.key is not None:
            return bearer(who.key)
        token = self.stack.issuer.token(
            who.identity.id.split("#", 1)[1], who.tenant, sorted(who.roles)
        )
        return bearer(token)

    def learn(self, run_id: str, who: Credential) -> None:
        if any(r.run_id == run_id for r in self.runs):
            return
        self.runs.append(Run(run_id, who.tenant, who.identity.ref, dict(self.policies[who.tenant])))

    def may_write_specs(self, who: Credential) -> bool:
        free = self.policies[who.tenant]["free_form"]
        return "admin" in who.roles or (free == "runner" and "runner" in who.roles)

    # ------------------------------------------------------------ the ways in

    @rule(who=st.integers(0, 15), task=st.sampled_from(sorted(TASKS)), agent=st.booleans())
    def start(self, who: int, task: str, agent: bool) -> None:
        caller = self.credentials[who % len(self.credentials)]
        body: dict[str, Any] = {"task": TASKS[task], "user": "key:someone-else (the CFO)"}
        if agent:
            body["agent"] = "desk"
        answer = self.stack.http.post("/v1/runs", json=body, headers=self.headers(caller))
        if caller.revoked:
            assert answer.status_code == 401, answer.text
        elif not caller.may("runner"):
            assert answer.status_code == 403, answer.text
        else:
            assert answer.status_code == 201, answer.text
            self.learn(answer.json()["run_id"], caller)

    @rule(who=st.integers(0, 15), task=st.sampled_from(sorted(TASKS)), variant=variants)
    def enqueue(self, who: int, task: str, variant: str) -> None:
        caller = self.credentials[who % len(self.credentials)]
        spec: dict[str, Any] = {"task": TASKS[task]}
        if variant == "desk":
            spec |= {"agent": "desk", "allowed_tools": ["search_notes", "create_ticket"]}
        elif variant == "own agent":
            spec |= {"agent": "mine", "approval": {"always": [], "roles": {"x": "intern"}}}
        elif variant == "widened":
            spec |= {"agent": "desk", "allowed_tools": ["create_ticket", "fetch_page"]}
        elif variant == "dropped approvals":
            spec |= {"approval": {"always": [], "require_at_or_above": "high"}}
        key = uuid.uuid4().hex[:8]
        backlog = f"desk-{caller.tenant}"
        answer = self.stack.http.post(
            f"/v1/backlogs/{backlog}/tasks",
            json={"tasks": [{"title": task, "idempotency_key": key, "spec": spec}]},
            headers=self.headers(caller),
        )
        if caller.revoked:
            assert answer.status_code == 401, answer.text
            return
        if not caller.may("runner"):
            assert answer.status_code == 403, answer.text
            return
        if variant == "widened" or (variant == "own agent" and not self.may_write_specs(caller)):
            assert answer.status_code == 403, answer.text
            return
        assert answer.status_code == 200, answer.text
        self.learn(child_run_id(backlog, key, 1), caller)

    @precondition(lambda self: self.runs)
    @rule(
        label=deciders,
        foreign=st.booleans(),
        which=st.integers(0, 50),
        approve=st.booleans(),
        edit=edits,
        n=st.integers(0, 9),
    )
    def decide(
        self, label: str, foreign: bool, which: int, approve: bool, edit: str, n: int
    ) -> None:
        states = {r.run_id: self.call(self.waiting(r, seconds=0)) for r in self.runs}
        waiting = [r for r in self.runs if states[r.run_id] is not None] or self.runs
        run = waiting[which % len(waiting)]
        tenant = self.tenants[(self.tenants.index(run.tenant) + foreign) % 2]
        self.decide_as(self.by(tenant, label), run, approve, edit, n)

    def decide_as(self, caller: Credential, run: Run, approve: bool, edit: str, n: int) -> None:
        """`caller` approves (with `edit`) or rejects what `run` waits for, if anything; the
        door's answer is what the caller's credential and the tenant's policy allow."""
        pending = self.call(self.waiting(run, seconds=5))
        body: dict[str, Any] = {} if approve else {"reason": "not this one"}
        if approve and pending is not None and pending.kind == "action":
            arguments = pending.arguments
            changed = "body" if "body" in arguments else next(iter(arguments))
            if edit == "patch":
                body["edit"] = {changed: f"edited {n}"}
            elif edit == "remove required":
                body["edit"] = {changed: None}
            elif edit == "replace":
                body["arguments"] = {**arguments, changed: f"replaced {n}"}
        verb = "approve" if approve else "reject"
        path = f"/v1/runs/{run.run_id}/{verb}"
        answer = self.stack.http.post(path, json=body, headers=self.headers(caller))
        if caller.revoked:
            assert answer.status_code == 401, answer.text
            return
        if not caller.may("viewer"):
            return
        if caller.tenant != run.tenant:
            # Another tenant's run reads exactly as a missing one.
            missing = self.stack.http.post(
                f"/v1/runs/{run.run_id}-x/{verb}", json=body, headers=self.headers(caller)
            )
            assert answer.status_code == missing.status_code, (answer.text, missing.text)
            if caller.may("approver"):
                assert answer.status_code == 404, answer.text
                assert answer.content == missing.content.replace(
                    f"{run.run_id}-x".encode(), run.run_id.encode()
                )
            return
        if not caller.may("approver"):
            assert answer.status_code == 403, answer.text
            return
        if pending is not None and not caller.decides_as(pending.required_role):
            assert answer.status_code in (403, 409), answer.text  # 409: it moved on meanwhile
            return
        assert answer.status_code in (200, 409), answer.text
        if answer.status_code == 200:
            done = answer.json()
            assert done["decision"] in ("approved", "counted", "rejected", "recorded"), done
            sent = body.get("edit") or body.get("arguments")
            kind = "replace" if "arguments" in body else "merge_patch"
            run.deciders.setdefault(caller.identity.ref, []).append(
                {"edit": sent, "kind": kind if sent else None}
            )

    @precondition(lambda self: self.runs)
    @rule(which=st.integers(0, 50), edit=edits, n=st.integers(0, 9))
    def two_approvers_approve(self, which: int, edit: str, n: int) -> None:
        """The run's own approvers in turn (ana, then eli's token, both in `support`): what
        a policy that asks for two people is for."""
        states = {r.run_id: self.call(self.waiting(r, seconds=0)) for r in self.runs}
        waiting = [r for r in self.runs if states[r.run_id] is not None]
        if not waiting:
            return
        run = waiting[which % len(waiting)]
        for label in ("ana", "eli"):
            self.decide_as(self.by(run.tenant, label), run, True, edit, n)

    @precondition(lambda self: self.runs)
    @rule(tenant=st.integers(0, 1), two=st.booleans(), mine=st.booleans())
    def admin_sets_the_policy(self, tenant: int, two: bool, mine: bool) -> None:
        admin = self.by(self.tenants[tenant], "admin")
        changes = {"two_person": two, "requester_may_approve": mine}
        answer = self.stack.http.put("/v1/tenant/policy", json=changes, headers=self.headers(admin))
        assert answer.status_code == 200, answer.text
        self.policies[admin.tenant] = answer.json()
        ana = self.by(self.tenants[tenant], "ana")
        refused = self.stack.http.put("/v1/tenant/policy", json=changes, headers=self.headers(ana))
        assert refused.status_code == 403, refused.text

    async def waiting(self, run: Run, *, seconds: float) -> Any:
        """The approval the run waits for, once it waits (within `seconds`)."""
        for _ in range(max(1, int(seconds / 0.25))):
            try:
                state = await self.stack.operator.runs.status(run.run_id, wait=5)
            except Exception:  # not started yet (a backlog's task), or ended
                state = None
            if state is not None and state.pending_approval is not None:
                return state.pending_approval
            if state is not None and state.status.value in ("completed", "failed", "cancelled"):
                return None
            await asyncio.sleep(0.25)
        return None

    # ------------------------------------------------------------ what always holds

    @invariant()
    def every_call_the_policy_stops_was_approved_as_it_says(self) -> None:
        for run in self.runs:
            steps = self.call(self.steps_of(run.run_id))
            by_seq = {s["seq"]: s for s in steps}
            for step in steps:
                if step["type"] != "tool_call":
                    continue
                rule_ = next(
                    (r for r in run.policy["rules"] if r["tool"] == step["name"] and not r["deny"]),
                    None,
                )
                if rule_ is None:
                    continue
                asked = by_seq.get(step["seq"] - 1)
                assert asked is not None and asked["type"] == "approval", (run, step)
                record = asked["output"]
                assert record and record["decision"] == "approved", (run, record)
                role = rule_["role"] or "approver"
                needed = max(rule_["approvers"], 2 if run.policy["two_person"] else 1)
                people = [*record["votes"], record]
                refs = [ref_of(p) for p in people]
                assert len(set(refs)) == len(refs) >= needed, (run, record)
                for person, ref in zip(people, refs, strict=True):
                    who = self.identity(ref)
                    assert who.tenant == run.tenant, (run, person)
                    assert person["role"] == role and who.decides_as(role), (run, person)
                    assert ref in run.deciders, (run, person)
                    if not run.policy["requester_may_approve"]:
                        assert ref != run.requester, (run, person)
                assert record["final_arguments"] == step["input"], (run, record, step)

    @invariant()
    def receipts_name_who_asked_and_who_decided_and_edits_are_what_was_sent(self) -> None:
        for run in self.runs:
            receipt = self.call(self.receipt_of(run.run_id))
            if receipt is None:
                continue
            requester = receipt["requester"]
            assert f"{requester['kind']}:{requester['id']}" == run.requester, (run, requester)
            assert receipt["tenant"] == run.tenant
            for record in receipt["approvals"]:
                if record["decision"] == "expired":
                    continue
                arguments = record["proposed_arguments"]
                for person in [*record["votes"], record]:
                    ref = ref_of(person)
                    assert ref in run.deciders, (run, person)
                    sent = run.deciders[ref]
                    if person["edit"] is not None:
                        assert {"edit": person["edit"], "kind": person["edit_kind"]} in sent
                        arguments = (
                            person["edit"]
                            if person["edit_kind"] == "replace"
                            else merge_patch.apply(arguments, person["edit"])
                        )
                if record["decision"] == "approved":
                    assert record["final_arguments"] == arguments, (run, record)

    def identity(self, ref: str) -> Credential:
        return next(c for c in self.credentials if c.identity.ref == ref)

    async def steps_of(self, run_id: str) -> list[dict[str, Any]]:
        async with self.stack.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT seq, type, name, status, input, output FROM steps WHERE run_id = %s "
                "AND final ORDER BY seq",
                (run_id,),
            )
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]

    async def receipt_of(self, run_id: str) -> dict[str, Any] | None:
        async with self.stack.pool.connection() as conn:
            cur = await conn.execute("SELECT receipt FROM receipts WHERE run_id = %s", (run_id,))
            row = await cur.fetchone()
        return None if row is None else row[0]

    def teardown(self) -> None:
        for run in self.runs:
            try:
                self.call(self.stack.operator.runs.cancel(run.run_id, wait=10))
            except Exception:  # ended, or never started (a backlog's task not yet begun)
                pass


def test_the_operators_policy_holds_through_the_door(
    env: WorkflowEnvironment, database_url: str, pool: Any, tmp_path: Path
) -> None:
    global STACK
    STACK = Stack(
        env.client.service_client.config.target_host,
        database_url,
        env.client.data_converter,
        tmp_path,
    )
    try:
        run_state_machine_as_test(
            PolicyDoor,
            settings=settings(
                max_examples=6,
                stateful_step_count=20,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                # No shrinking: a sequence replayed on this stack outlasts the test's timeout.
                phases=[Phase.explicit, Phase.generate],
            ),
        )
    finally:
        STACK.close()
        STACK = None
