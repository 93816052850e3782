"""`client.approvers`: the people whose signed decisions a tenant's runs take, and their
keys on this machine: a decision signed with a key proves who made it."""

from __future__ import annotations

from pathlib import Path

from agentledger.client import approver_keys
from agentledger.client.scope import Scope
from agentledger.core.approver_key import ApproverKey
from agentledger.core.config import user_config_dir
from agentledger.core.errors import OperationRefused
from agentledger.core.spec import Signer
from agentledger.store.approver_store import ApproverStore


class Approvers:
    """Approvers of the caller's tenant's runs (of every tenant's, for an operator)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def config_dir(self) -> Path:
        """Where approver keys live on this machine."""
        return self.scope.config.config_dir or user_config_dir({})

    def key(self, name: str) -> ApproverKey | None:
        """`name`'s approver key on this machine, to sign decisions with; None if absent."""
        return approver_keys.load(self.config_dir(), name)

    async def add(
        self,
        name: str,
        *,
        role: str,
        tenant: str | None = None,
        any_tenant: bool = False,
        replace: bool = False,
    ) -> Signer:
        """A key pair for a new approver of `tenant`'s runs (default the caller's tenant):
        the private key kept in `config_dir()`, the public key registered, so runs started
        afterwards take only signed decisions. Names are one person each per tenant; an
        approver of every tenant (`any_tenant`) and a new key for a registered name
        (`replace`) are an operator's acts, refused under AGENTLEDGER_TENANT."""
        self.scope.acting_in(tenant)  # a tenant's caller never widens to another's
        if replace:
            self.scope.refuse_unless_operator("--replace gives a registered approver a new key")
        decides = self.scope.approver_tenant(tenant, any_tenant=any_tenant)
        store = ApproverStore(await self.scope.database())
        where = f"tenant {decides!r}" if decides else "any tenant"
        if not replace and await store.taken(name, decides):
            raise OperationRefused(
                f"an approver {name!r} is already registered for {where}: names are one person "
                "each; pick another name, or, as an operator replacing their key on purpose, "
                "add --replace"
            )
        created = approver_keys.create(self.config_dir(), name, role, decides, replace=replace)
        if not await store.add(created.signer, replace=replace):
            raise OperationRefused(
                f"an approver {name!r} was registered for {where} meanwhile; add --replace to "
                "replace their key on purpose"
            )
        return created.signer

    async def listed(self, *, tenant: str | None = None) -> list[Signer]:
        """The approvers who decide runs of `tenant` (default the caller's; an operator
        without either sees every one) and their key ids."""
        decides = self.scope.acting_in(tenant)
        store = ApproverStore(await self.scope.database())
        return await (store.registered_for(decides) if decides else store.signers())
