"""Approvals no one can forge: approvers are Ed25519 keys, and a run with keyed approvers
applies only a decision one of them signed for this run, this approval and this action,
recently, in the role and tenant the approval needs. Each refusal is recorded on the run."""

from __future__ import annotations

import stat
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import WorkflowUpdateFailedError

from agentledger import RunClient
from agentledger.client import approver_keys
from agentledger.client.approver_keys import ApproverKey
from agentledger.core import approval_signatures
from agentledger.core.errors import InvalidInput, OperationError
from agentledger.core.results import PendingApproval
from agentledger.core.spec import ApprovalPolicy
from agentledger.core.wire import ApproveInput, RejectInput
from agentledger.store.approver_store import ApproverStore
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as door
from tests import client_ops as ops
from tests.support import make_spec, wait_pending
from tests.test_cli import run_cli


@pytest.fixture
def tenant() -> str:
    """A tenant of the test's own, so its approvers never reach other tests' runs."""
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def keys(tmp_path: Path, tenant: str) -> dict[str, ApproverKey]:
    return {
        "ana": approver_keys.create(tmp_path, "ana", "approver", tenant),
        "bob": approver_keys.create(tmp_path, "bob", "intern", tenant),
        "carl": approver_keys.create(tmp_path, "carl", "approver", "another-tenant"),
    }


def signed(
    key: ApproverKey,
    run_id: str,
    pending: PendingApproval,
    *,
    approval_id: str | None = None,
    at: datetime | None = None,
    **fields: object,
) -> ApproveInput:
    decision = ApproveInput(
        action_hash=pending.action_hash, by=key.signer.name, role="approver", **fields
    )
    signature = approval_signatures.sign(
        key.key, run_id, approval_id or pending.approval_id, decision, at or datetime.now(UTC)
    )
    return decision.model_copy(update={"signature": signature})


async def test_only_a_proper_signature_applies_and_the_receipt_names_its_key(
    client, settings, pool, worker, keys, tenant, tmp_path
):
    spec = make_spec(
        tenant=tenant,
        approval={"signers": [k.signer.model_dump() for k in keys.values()]},
    )
    ana = keys["ana"]
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        run_id = started.run_id
        pending = await wait_pending(client, run_id)
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
        forged = signed(ana, run_id, pending).model_copy(update={"edit": {"to": "eve@evil"}})
        impostor = approver_keys.create(tmp_path / "impostor", "ana", "approver", tenant)
        stolen_id = signed(impostor, run_id, pending)
        stolen_id.signature = stolen_id.signature.model_copy(  # type: ignore[union-attr]
            update={"key_id": ana.signer.key_id}
        )
        refusals = {
            "unsigned": (
                ApproveInput(action_hash=pending.action_hash, by="ana", role="approver"),
                "only signed decisions",
            ),
            "altered after signing": (forged, "does not match key"),
            "another key under ana's id": (stolen_id, "does not match key"),
            "signed for another run": (
                signed(ana, "run-someone-elses", pending),
                "does not match key",
            ),
            "signed for another approval": (
                signed(ana, run_id, pending, approval_id="0099-approval"),
                "signed for approval 0099-approval",
            ),
            "expired": (
                signed(ana, run_id, pending, at=datetime.now(UTC) - timedelta(hours=2)),
                "expired",
            ),
            "wrong role": (signed(keys["bob"], run_id, pending), "role 'intern'"),
            "wrong tenant": (signed(keys["carl"], run_id, pending), "for tenant 'another-tenant'"),
        }
        for case, (decision, message) in refusals.items():
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(AgentRunWorkflow.approve, decision)
            assert message in str(refused.value.cause), case

        state = await ops.status(client, run_id)
        assert state.status.value == "waiting_for_approval", "nothing applied"
        assert len(state.refusals) == len(refusals), "each refusal is recorded on the run"
        assert all(r.approval_id for r in state.refusals)

        proper = await ops.approve(
            client, run_id, by="ana", role="approver", signer=ana, action_hash=pending.action_hash
        )
        assert proper.decision == "approved"
        result = await handle.result()
        assert result.status.value == "completed"
        with pytest.raises(OperationError, match="already ended"):
            await ops.approve(client, run_id, by="ana", role="approver", signer=ana)

    receipt = await ops.receipt(pool, run_id)
    [approval] = receipt["approvals"]
    assert approval["by"] == "ana" and approval["key_id"] == ana.signer.key_id


def test_a_replayed_or_stale_decision_is_refused() -> None:
    """Pure check: the same signed decision sent again for a later approval is a replay."""
    private = Ed25519PrivateKey.generate()
    public = approval_signatures.public_key_text(private.public_key())
    raw = private.public_key().public_bytes_raw()
    signer = {
        "name": "ana",
        "role": "approver",
        "tenant": None,
        "public_key": public,
        "key_id": approval_signatures.key_id(raw),
    }
    policy = ApprovalPolicy(signers=[signer])  # type: ignore[list-item]
    now = datetime.now(UTC)
    first = PendingApproval(
        approval_id="0003-approval",
        step_id="0003-approval",
        tool="send_message",
        arguments={},
        action_hash="h1",
        required_role="approver",
        tenant="default",
        requested_at=now,
        expires_at=now + timedelta(hours=1),
    )
    later = first.model_copy(update={"approval_id": "0007-approval", "step_id": "0007-approval"})
    decision = RejectInput(action_hash="h1", by="ana", role="approver", reason="no")
    decision.signature = approval_signatures.sign(private, "run-1", "0003-approval", decision, now)
    assert approval_signatures.check(policy, "run-1", first, [], decision, now) is not None
    with pytest.raises(approval_signatures.SignatureRefused, match="replayed"):
        approval_signatures.check(policy, "run-1", later, ["0003-approval"], decision, now)
    with pytest.raises(approval_signatures.SignatureRefused, match="in the future"):
        approval_signatures.check(policy, "run-1", first, [], decision, now - timedelta(minutes=5))


async def test_runs_take_the_registered_approvers_and_the_cli_signs(
    client, settings, pool, worker, tenant, tmp_path, monkeypatch
):
    config = tmp_path / "config"
    monkeypatch.setenv("AGENTLEDGER_CONFIG_DIR", str(config))
    home = tmp_path / "home"
    added = await run_cli(
        settings, home, "approvers", "add", "dana", "--role", "approver", "--tenant", tenant
    )
    assert added.code == 0, added.err
    key_file = config / "approvers" / "dana.pem"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    [registered] = [s for s in await ApproverStore(pool).signers(tenant) if s.name == "dana"]

    spec = make_spec(tenant=tenant)
    async with worker():
        started = await door.start(
            client, pool, spec, task_queue=settings.task_queue, acting_tenant=None
        )
        pending = await wait_pending(client, started.run_id)
        unsigned = await run_cli(
            settings, home, "approve", started.run_id, "--by", "eve", "--role", "approver"
        )
        assert unsigned.code == 5 and "only signed decisions" in unsigned.err
        no_role = await run_cli(settings, home, "approve", started.run_id, "--by", "eve")
        assert no_role.code == 2 and "--role" in no_role.err, "the default role is no free pass"
        stale = await run_cli(
            settings, home, "approve", started.run_id, "--by", "dana", "--action-hash", "0" * 16
        )
        assert stale.code == 5 and "stale approval" in stale.err
        approved = await run_cli(
            settings,
            home,
            "approve",
            started.run_id,
            "--by",
            "dana",
            "--action-hash",
            pending.action_hash,
            "--json",
        )
        assert approved.code == 0, approved.err
        await client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id).result()
    receipt = await ops.receipt(pool, started.run_id)
    assert receipt["approvals"][0]["key_id"] == registered.key_id
    assert receipt["approvals"][0]["by"] == "dana"


async def test_the_python_client_names_a_role_or_a_signer(client, settings, worker, tmp_path):
    """`client.runs.approve` has no default role: a decision without one is refused before it
    is sent, and the run still waits; a signer's key carries its role."""
    run_client = RunClient(client, settings)
    async with worker():
        spec = make_spec(allowed_tools=["send_message"])
        run_id = (await run_client.runs.start(**spec.model_dump(exclude={"agent"}))).run_id
        await wait_pending(client, run_id)
        for decide in (
            lambda: run_client.runs.approve(run_id, by="ana"),
            lambda: run_client.runs.reject(run_id, by="ana", reason="no"),
        ):
            with pytest.raises(InvalidInput, match="name the role"):
                await decide()
        assert (await run_client.runs.status(run_id)).status.value == "waiting_for_approval"
        decided = await run_client.runs.approve(run_id, by="ana", role="approver")
        assert decided.decision == "approved"
        assert (await run_client.runs.result(run_id)).status.value == "completed"
    await run_client.close()
