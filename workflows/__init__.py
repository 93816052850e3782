"""Workflows: deterministic orchestration only. All I/O lives in activities."""

from workflows.agent_run import AgentRunWorkflow

__all__ = ["AgentRunWorkflow"]
