"""The version branches of the workflow code: which remain, which are retired, and which runs
need which.

A version branch is a place where workflow code takes one path for runs started by older code
and another for new ones: a `workflow.patched(id)` call, or a test of the run's generation
(agentledger.workflows.changes). Each is a cost carried for as long as some run may need its
old path, so there are few (at most `MAX_LIVE`, a test counts them),
each names the condition for its removal, and `agentledger deploy patches`
says which open runs still need each old path.

Retired branches are refused by name, never replayed along a path the run did not take:
`retired_needed` says so from a history's facts, the run workflow refuses such an input
(`Changes`), and recorded histories of that kind live in tests/histories/archive/. The runs of
generation 2 and before (no generation in their input) needed sixteen of them (fifteen patch
ids and the generation-2 and -3 switches); the runs of generations 3 and 4 needed the
generation-4 and generation-5 switches.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from agentledger.core import constants as names

# The oldest generation today's run workflow replays; the one new runs take is in
# agentledger.workflows.changes (CURRENT_GENERATION).
OLDEST_GENERATION = 5
# Each live branch is a second path every reader of the workflow code must keep in mind.
MAX_LIVE = 3


class VersionBranch(BaseModel):
    id: str
    kind: Literal["generation", "patch"]
    workflow_type: str
    where: str
    old_path: str  # what runs that need the old branch do there
    # When no run can need the old path any more, in terms an operator can check. What the
    # project then does to its code and tests is for its developers.
    removal: str


GENERATION_6 = "generation-6"
ADMISSION_SWEEP = "admission-sweeps-closed-runs"
BACKLOG_CHILD_POLICY = "backlog-child-policy"
# Retired, its histories archived: a workflow of the user's own that
# started an agent's run (`agentledger.workflows.run_agent`) before the run read its tenant's
# policy. Its id stays so `deploy check` can name a run that still needs it.
RUN_AGENT_READS_POLICY = "run-agent-reads-policy"

LIVE: tuple[VersionBranch, ...] = (
    VersionBranch(
        id=GENERATION_6,
        kind="generation",
        workflow_type=names.WORKFLOW_NAME,
        where="agentledger/workflows/approvals.py (Approvals), "
        "agentledger/workflows/steering.py (Steering.model_call), "
        "agentledger/workflows/agent_run.py (the run's charge) and "
        "agentledger/workflows/sessions.py (double-texting)",
        old_path="a run of generation 5 lays an approver's edit over the arguments "
        "member by member (null sets a member to null, an object replaces one whole), "
        "asks a person about every call that needs approval (no standing approval looked "
        "up), sends every model call to the rate-limited model queue, never to its own, is "
        "charged to nobody (no budget admits or ends it), and, a session, takes every "
        "message into the turn in flight",
        removal="no open run of generation 5",
    ),
    VersionBranch(
        id=ADMISSION_SWEEP,
        kind="patch",
        workflow_type=names.ADMISSION_WORKFLOW_NAME,
        where="agentledger/workflows/admission.py (TenantAdmissionWorkflow.run)",
        old_path="a queue started before the sweep waits without its sweep timer",
        removal="every open admission queue has continued as new since (its history has the "
        "marker)",
    ),
    VersionBranch(
        id=BACKLOG_CHILD_POLICY,
        kind="patch",
        workflow_type=names.BACKLOG_WORKFLOW_NAME,
        where="agentledger/workflows/backlog.py (starting a task's run)",
        old_path="a backlog that started runs before the patch starts them without reading "
        "its tenant's policy (no allowed priorities, no wait in a capped tenant's queue)",
        removal="every open backlog that has started a run has the marker (it continued as "
        "new since)",
    ),
)

# The engine's own workflow types; any other that starts children is a user's workflow
# calling `run_agent`.
# agentledger's own workflows that start runs: each reads the tenant's policy as it does
# (a schedule's fire from its first version), never a user's `run_agent` from before it did.
OWN_WORKFLOWS = (
    names.WORKFLOW_NAME,
    names.ADMISSION_WORKFLOW_NAME,
    names.BACKLOG_WORKFLOW_NAME,
    names.SCHEDULED_FIRE_WORKFLOW_NAME,
)
RETIRED_GENERATIONS = "generation-2-and-before"
# Runs whose input names generation 3 or 4: a run of generation 3 took an admit signal from
# any sender, and both returned their result however they ended (Temporal showed a failed
# or rejected run as Completed).
RETIRED_GENERATIONS_3_AND_4 = "generations-3-and-4"
# What runs whose input names no generation took, by patch id: each was a branch of
# agentledger.workflows.agent_run or recording.py, retired with the generation-3 cut; kept
# so `deploy check` recognises a run that still needs one.
RETIRED_PATCHES = (
    "agentrun-generation-2",
    "continue-as-new-after-step-boundary",
    "effect-keys-from-content",
    "tool-cancel-waits-for-the-attempt",
    "unknown-outcome-expiry-is-no-decision",
    "judge-usage-counted",
    "receipt-shielded-from-cancel",
    "model-call-queue",
    "quiet-mirror-writes",
    "mirror-sync-local-activity",
    "mirror-sync-after-commit",
    "mirror-queue",
    "mirror-batch-rides-step",
)
RETIRED_NOTE = (
    "runs whose input names no generation (started before generation 3) took the patch-era "
    "paths, since retired from this code"
)
RETIRED_NOTES = {
    RETIRED_GENERATIONS_3_AND_4: "runs whose input names generation 3 or 4 took an admit "
    "from any sender, and returned their result however they ended, paths since retired from "
    "this code",
    RUN_AGENT_READS_POLICY: "a workflow of yours that started an agent's run before "
    "`run_agent` read the tenant's policy, since retired from this code",
}


class HistoryFacts(BaseModel):
    """What a run's history says about which paths its code took."""

    workflow_type: str
    generation: int | None = None  # the run workflow's input (`workflow_generation`)
    patches: list[str] = []  # patch ids with a marker in the history
    decided: bool = False  # a workflow task completed: the code ran past its first awaits
    started_children: bool = False


class BranchNeed(BaseModel):
    """One run's need of one branch's old path."""

    workflow_id: str
    run_id: str
    branch: str
    retired: bool

    def message(self) -> str:
        if self.retired:
            return (
                f"needs retired branch {self.branch} "
                f"({RETIRED_NOTES.get(self.branch, RETIRED_NOTE)}): it cannot replay on this "
                "code; keep the build it is pinned to until it closes"
            )
        return f"needs the old path of {self.branch}"


def retired_needed(facts: HistoryFacts) -> list[str]:
    """The retired branches a history needs: a run of the run workflow from before the oldest
    generation this code replays, and any run with a marker of a retired patch."""
    needed = []
    if facts.workflow_type == names.WORKFLOW_NAME:
        retired = retired_generation(facts.generation)
        if retired is not None:
            needed.append(retired)
    needed += sorted(set(facts.patches) & set(RETIRED_PATCHES))
    if (
        facts.workflow_type not in OWN_WORKFLOWS
        and facts.started_children
        and RUN_AGENT_READS_POLICY not in facts.patches
    ):
        needed.append(RUN_AGENT_READS_POLICY)
    return needed


def retired_generation(generation: int | None) -> str | None:
    """The retired branch a run of the run workflow of this generation needs, if any."""
    if generation is None or generation < 3:
        return RETIRED_GENERATIONS
    if generation < OLDEST_GENERATION:
        return RETIRED_GENERATIONS_3_AND_4
    return None


def live_old_paths(facts: HistoryFacts) -> list[str]:
    """The live branches whose old path the run takes (or has taken)."""
    needed = []
    if facts.workflow_type == names.WORKFLOW_NAME and facts.generation == 5:
        needed.append(GENERATION_6)
    if (
        facts.workflow_type == names.ADMISSION_WORKFLOW_NAME
        and facts.decided
        and ADMISSION_SWEEP not in facts.patches
    ):
        needed.append(ADMISSION_SWEEP)
    if (
        facts.workflow_type == names.BACKLOG_WORKFLOW_NAME
        and facts.started_children
        and BACKLOG_CHILD_POLICY not in facts.patches
    ):
        needed.append(BACKLOG_CHILD_POLICY)
    return needed


class BranchUse(BaseModel):
    """A live branch, and the open runs that still need its old path."""

    branch: VersionBranch
    open_runs: list[str]  # workflow ids

    @property
    def removable(self) -> bool:
        return not self.open_runs

    @property
    def advice(self) -> str:
        if self.open_runs:
            return f"keep: {len(self.open_runs)} open run(s) need the old path"
        return "no open run here needs the old path"


class PatchInventory(BaseModel):
    live: list[BranchUse]
    retired: list[BranchNeed]  # open runs that need a retired branch
    scanned: int

    def json_view(self) -> dict[str, object]:
        return {
            "scanned": self.scanned,
            "live": [
                {
                    **use.branch.model_dump(),
                    "open_runs": use.open_runs,
                    "removable": use.removable,
                    "advice": use.advice,
                }
                for use in self.live
            ],
            "retired": [need.model_dump() | {"message": need.message()} for need in self.retired],
        }
