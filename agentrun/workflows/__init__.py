"""Workflows: deterministic orchestration only. All I/O lives in activities."""

from agentrun.workflows.agent_run import AgentRunWorkflow

__all__ = ["AgentRunWorkflow"]
