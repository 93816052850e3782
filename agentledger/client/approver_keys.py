"""An approver's private key, kept in the user's config directory (mode 0600), and the
signature it puts on a decision. The public half goes to the approvers table."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from agentledger.core import approval_signatures, bounds
from agentledger.core.approver_key import ApproverKey
from agentledger.core.errors import InvalidRequest, OperationError, OperationRefused
from agentledger.core.spec import Signer

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
NAME_CHARS = 100  # a file name in the config directory: tighter than agentledger.core.bounds


def _paths(config_dir: Path, name: str) -> tuple[Path, Path]:
    bounds.check_text("approver name", name, NAME_CHARS)
    if not NAME.match(name):
        raise InvalidRequest(f"approver name {name!r}: use letters, digits and . _ @ - (up to 100)")
    folder = config_dir / "approvers"
    return folder / f"{name}.pem", folder / f"{name}.json"


def create(
    config_dir: Path, name: str, role: str, tenant: str | None, *, replace: bool = False
) -> ApproverKey:
    """A new key pair for `name`: the private key written with mode 0600, never replaced
    unless `replace` (an operator replacing the key on purpose)."""
    for field, text in (("role", role), ("tenant", tenant)):  # the name: `_paths`
        bounds.check_text(field, text)
    key_path, identity_path = _paths(config_dir, name)
    key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if replace:
        key_path.unlink(missing_ok=True)
        identity_path.unlink(missing_ok=True)
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    signer = Signer(
        name=name,
        role=role,
        tenant=tenant,
        public_key=approval_signatures.public_key_text(key.public_key()),
        key_id=approval_signatures.key_id(raw),
    )
    try:
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as err:
        raise OperationRefused(
            f"{key_path} exists already: {name} has a key on this machine"
        ) from err
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    identity_path.write_text(signer.model_dump_json(indent=2))
    return ApproverKey(signer, key)


def load(config_dir: Path, name: str) -> ApproverKey | None:
    """`name`'s key on this machine, or None when they have none here."""
    key_path, identity_path = _paths(config_dir, name)
    if not key_path.exists():
        return None
    if key_path.stat().st_mode & 0o077:
        raise OperationError(f"{key_path} is readable by others: `chmod 600 {key_path}`")
    key = load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise OperationError(f"{key_path} is not an Ed25519 key")
    signer = Signer.model_validate(json.loads(identity_path.read_text()))
    return ApproverKey(signer, key)
