"""What `agentledger deploy status` shows: the builds of a Worker Deployment, the open runs pinned
to each, and which can be retired (not current, and no open run on it)."""

from __future__ import annotations

from pydantic import BaseModel


class BuildStatus(BaseModel):
    build_id: str
    current: bool
    drainage: str | None = None  # the server's word: draining, drained, or None
    open_runs: list[str] = []  # workflow ids of the open runs on this build

    @property
    def retirable(self) -> bool:
        """Its workers can stop: new runs go elsewhere and no open run is on it."""
        return not self.current and not self.open_runs


class DeployStatus(BaseModel):
    deployment_name: str
    current_build: str | None
    builds: list[BuildStatus]
    unversioned_runs: list[str] = []  # open runs of unversioned workers

    def json_view(self) -> dict[str, object]:
        return {
            "deployment_name": self.deployment_name,
            "current_build": self.current_build,
            "builds": [b.model_dump() | {"retirable": b.retirable} for b in self.builds],
            "unversioned_runs": self.unversioned_runs,
        }
