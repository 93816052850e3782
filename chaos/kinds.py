"""The kinds of run the mixed load draws from its seed, each started and driven the way a
user would (through the door, `say`, the session turns and `end`, `fork`), and what each
must have done once it ended: its effects, by tool.

Every kind but `plain` has its own feature to break: a `session` takes turns until it
compacts and continues as new; a `subagent` parent delegates to a helper whose message waits
for an approval; a `say` run is told something mid-run; a `fork` restarts an ended plain run
from its first step (its effects are its parent's, found in the ledger, not done again); a
`signed` run's tenant has a keyed approver, so only signed decisions count; a `capped` run's
tenant may have a tenth of the load's open runs in flight (one at least), so its runs queue
behind its cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from agentledger.client import approver_keys
from agentledger.client.approver_keys import ApproverKey
from agentledger.core.admission_models import TenantLimits
from agentledger.core.errors import OperationRefused
from agentledger.core.spec import RunSpec
from agentledger.profiles import Agent
from agentledger.store.approver_store import ApproverStore
from agentledger.store.tenant_store import TenantStore
from chaos.lab import Lab, chaos_spec
from tests import client_ops as door
from tests import client_ops as fork_ops
from tests import client_ops as steering_ops

KINDS = ["plain", "session", "subagent", "say", "fork", "signed", "capped"]
# How often each kind is drawn beyond the first of each (forks need an ended plain run).
WEIGHTS = {"plain": 3, "session": 2, "subagent": 2, "say": 2, "fork": 1, "signed": 2, "capped": 2}
CHILD = "subagent child"

SIGNED_TENANT = "chaos-signed"
CAPPED_TENANT = "chaos-capped"
APPROVER = "ana"

SESSION_TASK = "Look up our refund policy."
HELPER_TASK = "Notify ana@example.com about our refund policy."
HELPER = Agent(name="helper", instructions="You help.", tools=["search_notes", "send_message"])
LEAD = Agent(name="lead", instructions="You delegate.", subagents=["helper"])
PARENT_TASK = f'Delegate: call agent__helper {{"task": "{HELPER_TASK}"}}'
SAID = "Also mention that refunds take five days."

EVERY_EFFECT = {"create_ticket": 1, "send_message": 1}
# The effects each kind's run does under its own id, once each.
EFFECTS: dict[str, dict[str, int]] = {
    "plain": EVERY_EFFECT,
    "say": EVERY_EFFECT,
    "signed": EVERY_EFFECT,
    "capped": EVERY_EFFECT,
    "session": {},  # it only reads: a compacted conversation may search again, harmlessly
    "subagent": {},  # the helper sends the message, in its own run
    "fork": {},  # keyed in its parent's scope: found in the ledger, not done again
    CHILD: {"send_message": 1},
}


def draw(runs: int, rng: random.Random) -> list[str]:
    """One of each kind first (in a drawn order), the rest drawn by weight; forks never
    come before the first plain run."""
    first = rng.sample(KINDS, len(KINDS))[:runs]
    rest = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()), k=max(0, runs - len(first)))
    kinds = first + rest
    if "fork" in kinds and "plain" in kinds and kinds.index("fork") < kinds.index("plain"):
        f, p = kinds.index("fork"), kinds.index("plain")
        kinds[f], kinds[p] = kinds[p], kinds[f]
    return kinds


@dataclass(frozen=True)
class SessionPace:
    """A session's turns after its task; compaction every `compact_after` turns."""

    turns: int = 6
    compact_after: int = 3


@dataclass
class Mix:
    """The tenants the kinds need, the runs started of each kind, and the drivers (session
    turns, `say`) that act on them while the chaos goes on."""

    lab: Lab
    sessions: SessionPace
    cap: int  # the capped tenant's runs in flight at once
    keys: dict[str, ApproverKey] = field(default_factory=dict)  # tenant -> its approver
    kind_of: dict[str, str] = field(default_factory=dict)  # run id -> kind
    ended_plain: list[str] = field(default_factory=list)  # fork sources
    said: Counter[str] = field(default_factory=Counter)  # how each `say` was answered
    turns_taken: Counter[str] = field(default_factory=Counter)  # session run -> turns answered
    drivers: list[asyncio.Task[None]] = field(default_factory=list)

    async def prepare(self, config_dir: Path) -> None:
        """The signed tenant's keyed approver and the capped tenant's cap, in Postgres."""
        key = approver_keys.create(config_dir, APPROVER, "approver", SIGNED_TENANT)
        await ApproverStore(self.lab.pool).add(key.signer)
        self.keys[SIGNED_TENANT] = key
        await TenantStore(self.lab.pool).save(
            TenantLimits(tenant=CAPPED_TENANT, max_in_flight=self.cap)
        )

    def spec(self, kind: str, index: int, queue: str) -> RunSpec:
        base = chaos_spec(f"{queue}-{kind}", index)
        own = base.model_dump(exclude_unset=True)
        if kind == "session":
            session = {"idle_timeout": 900, "compact_after_turns": self.sessions.compact_after}
            return RunSpec.model_validate(
                {**own, "task": SESSION_TASK, "allowed_tools": ["search_notes"], "session": session}
            )
        if kind == "subagent":
            fields = LEAD.spec_fields({"lead": LEAD, "helper": HELPER})
            return RunSpec.model_validate(
                {**own, **fields, "task": PARENT_TASK, "allowed_tools": []}
            )
        tenant = {"signed": SIGNED_TENANT, "capped": CAPPED_TENANT}.get(kind)
        if tenant is not None:
            return base.model_copy(update={"tenant": tenant})
        return base

    async def start(self, kind: str, index: int, queue: str) -> str | None:
        """Start one run of `kind` (None: a fork with no ended plain run to fork yet)."""
        client = self.lab.client
        if kind == "fork":
            if not self.ended_plain:
                return None
            source = self.ended_plain[index % len(self.ended_plain)]
            started = await fork_ops.fork_run(
                client,
                self.lab.pool,
                source,
                from_step=1,
                key=f"{queue}-fork-{index:04d}",
                task_queue=queue,
                indexed=False,
            )
        else:
            spec = self.spec(kind, index, queue)
            started = await door.start(
                client, self.lab.pool, spec, task_queue=queue, acting_tenant=None, indexed=False
            )
        if started.run_id in self.kind_of:  # started before, its answer lost: drivers run
            return started.run_id
        self.kind_of[started.run_id] = kind
        if kind == "session":
            self.drivers.append(asyncio.create_task(self._converse(started.run_id)))
        elif kind == "say":
            self.drivers.append(asyncio.create_task(self._say(started.run_id)))
        return started.run_id

    def ended(self, run_ids: list[str]) -> None:
        """Plain runs that ended become fork sources."""
        self.ended_plain += [r for r in run_ids if self.kind_of.get(r) == "plain"]

    async def _say(self, run_id: str) -> None:
        """Tell the run something once (the same message id on every try)."""
        while True:
            try:
                said = await steering_ops.say(
                    self.lab.client, run_id, SAID, by="chaos", message_id=f"{run_id}-said", wait=5
                )
            except OperationRefused:  # it ended first: a truthful answer, counted
                self.said["refused (the run had ended)"] += 1
                return
            except Exception:  # a service is down on purpose: try again
                await asyncio.sleep(1)
                continue
            self.said[said.delivered] += 1
            return

    async def _turns_answered(self, run_id: str) -> int:
        async with self.lab.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT count(*) FROM events
                   WHERE run_id = %s AND type = 'session.turn_answered'""",
                (run_id,),
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def _converse(self, run_id: str) -> None:
        """The session's turns, each said once it answered the last, then `end`."""
        for turn in range(1, self.sessions.turns + 2):
            while True:  # turn answered (the task is turn 1)?
                with contextlib.suppress(Exception):
                    answered = await self._turns_answered(run_id)
                    self.turns_taken[run_id] = answered
                    if answered >= turn:
                        break
                await asyncio.sleep(0.5)
            if turn > self.sessions.turns:
                break
            while True:
                try:
                    await steering_ops.say(
                        self.lab.client,
                        run_id,
                        f"Turn {turn + 1}: what else do the notes say?",
                        by="chaos",
                        message_id=f"{run_id}-turn-{turn + 1}",
                        wait=5,
                    )
                    break
                except Exception:
                    await asyncio.sleep(1)
        while True:
            try:
                await steering_ops.end_session(self.lab.client, run_id, by="chaos", wait=5)
                return
            except OperationRefused:  # ended already (its end was applied before the answer)
                return
            except Exception:
                await asyncio.sleep(1)

    def of_kind(self, kind: str) -> list[str]:
        return [run_id for run_id, its in self.kind_of.items() if its == kind]

    async def unsigned(self) -> list[str]:
        """The signed tenant's runs with a decision its approver's key did not sign, or none
        at all (each asks one approval)."""
        runs = self.of_kind("signed")
        key_id = self.keys[SIGNED_TENANT].signer.key_id
        async with self.lab.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT r.run_id, a->>'key_id' FROM receipts r
                   LEFT JOIN LATERAL jsonb_array_elements(r.receipt->'approvals') a ON true
                   WHERE r.run_id = ANY(%s)""",
                (runs,),
            )
            rows = list(await cur.fetchall())
        return [
            f"{run_id}: a decision signed by {signed!r}, not the tenant's approver ({key_id})"
            for run_id, signed in rows
            if signed != key_id
        ]

    async def queued(self) -> int:
        """The capped tenant's runs that waited in its queue."""
        async with self.lab.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT count(DISTINCT run_id) FROM events
                   WHERE run_id = ANY(%s) AND type = 'run.queued'""",
                (self.of_kind("capped"),),
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def mirrored_status(self, run_id: str) -> str:
        """The run's status as the mirror has it."""
        async with self.lab.pool.connection() as conn:
            cur = await conn.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,))
            row = await cur.fetchone()
        return str(row[0]) if row else "not in the mirror"

    async def stop(self) -> None:
        for driver in self.drivers:
            driver.cancel()
        await asyncio.gather(*self.drivers, return_exceptions=True)


async def compacted(lab: Lab, run_ids: list[str]) -> int:
    """Runs (sessions) that compacted their conversation at least once."""
    async with lab.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT count(DISTINCT run_id) FROM events
               WHERE run_id = ANY(%s) AND type = 'session.compacted'""",
            (run_ids,),
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def by_kind(kind_of: dict[str, str]) -> dict[str, int]:
    counted = Counter(kind_of.values())
    return {kind: counted[kind] for kind in [*KINDS, CHILD] if counted[kind]}
